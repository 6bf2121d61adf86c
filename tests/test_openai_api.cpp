// The API layer (server/openai_api.h) over a real engine on the default
// model, without sockets: /health follows the engine (503 while loading,
// 200 serving, 503 after a device fault and while draining, each with its
// reason), completions are refused with 503 in those states, a greedy
// completion answers generate()'s text, routes and methods are checked.
#include <gtest/gtest.h>

#include <condition_variable>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "server/openai_api.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn::server {
namespace {

using namespace std::chrono_literals;
const std::string kModel = std::string(NEXTN_SOURCE_DIR) + "/models/default";

// Records the one response it gets.
class Recorder : public Responder {
 public:
  void send(int status, const std::string&, std::string body) override { finish(status, std::move(body)); }
  void start_stream(int status, const std::string&) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
  }
  void write(std::string chunk) override {
    std::lock_guard<std::mutex> lock(mu_);
    body_ += chunk;
  }
  void end() override { finish(status_, ""); }
  void on_gone(std::function<void()>) override {}

  // {status, body} once the response ended (status 0: none within 60 s).
  std::pair<int, std::string> wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 60s, [&] { return done_; });
    return {done_ ? status_ : 0, body_};
  }

 private:
  void finish(int status, std::string body) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = status;
      body_ += body;
      done_ = true;
    }
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int status_ = 0;
  std::string body_;
  bool done_ = false;
};

std::pair<int, std::string> call(OpenAiApi& api, const std::string& method, const std::string& path,
                                 const std::string& body = "") {
  auto r = std::make_shared<Recorder>();
  api.handle(HttpRequest{method, path, body}, r);
  return r->wait();
}

const char* kGreedy = R"({"prompt": "def fibonacci(n):", "max_tokens": 6, "temperature": 0})";

EngineOptions small_engine() {
  EngineOptions eo;
  eo.limits.max_prompt_tokens = 64;
  eo.limits.max_tokens = 16;
  eo.limits.max_batch = 2;
  return eo;
}

TEST(OpenAiApi, HealthFollowsTheEngineFromLoadingToDraining) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  Metrics metrics;
  OpenAiApi api(tokenizer, std::nullopt, metrics, "default", small_engine().limits);

  auto [status, body] = call(api, "GET", "/health");
  EXPECT_EQ(status, 503);
  EXPECT_EQ(nlohmann::json::parse(body)["status"], "loading");
  EXPECT_EQ(call(api, "POST", "/v1/completions", kGreedy).first, 503);
  EXPECT_EQ(call(api, "GET", "/v1/models").first, 200);  // the name is known before the weights

  Engine engine(ckpt, tokenizer, small_engine(), metrics);
  api.set_engine(&engine);
  EXPECT_EQ(call(api, "GET", "/health"), (std::pair<int, std::string>{200, "{\"status\":\"ok\"}"}));
  std::tie(status, body) = call(api, "POST", "/v1/completions", kGreedy);
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(nlohmann::json::parse(body)["choices"][0]["finish_reason"], "length");

  api.begin_drain();
  std::tie(status, body) = call(api, "GET", "/health");
  EXPECT_EQ(status, 503);
  EXPECT_EQ(nlohmann::json::parse(body)["status"], "draining");
  std::tie(status, body) = call(api, "POST", "/v1/completions", kGreedy);
  EXPECT_EQ(status, 503);
  EXPECT_EQ(nlohmann::json::parse(body)["error"]["type"], "server_error");
  api.shutdown();
}

// The seam: the drafter factory the engine calls for every job throws what
// a sticky CUDA error throws; the engine keeps it and the API reports it.
TEST(OpenAiApi, ADeviceFaultTurnsHealthTo503AndRefusesWork) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  Metrics metrics;
  EngineOptions eo = small_engine();
  eo.make_drafter = [](ModelRuntime&) -> std::unique_ptr<Drafter> {
    throw DeviceFault("CUDA: planted illegal address");
  };
  OpenAiApi api(tokenizer, std::nullopt, metrics, "default", eo.limits);
  Engine engine(ckpt, tokenizer, eo, metrics);
  api.set_engine(&engine);
  EXPECT_EQ(call(api, "GET", "/health").first, 200);
  auto [status, body] = call(api, "POST", "/v1/completions", kGreedy);
  EXPECT_EQ(status, 500);
  EXPECT_NE(body.find("planted illegal address"), std::string::npos) << body;
  std::tie(status, body) = call(api, "GET", "/health");
  EXPECT_EQ(status, 503);
  const auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["status"], "error");
  EXPECT_NE(j.value("reason", std::string()).find("planted illegal address"), std::string::npos) << body;
  EXPECT_EQ(call(api, "POST", "/v1/completions", kGreedy).first, 503);
  api.shutdown();
}

TEST(OpenAiApi, RoutesAndMethods) {
  const auto tokenizer = tok::load_model_tokenizer(kModel, "test");
  Metrics metrics;
  OpenAiApi api(tokenizer, std::nullopt, metrics, "default", ServerLimits{});
  EXPECT_EQ(call(api, "GET", "/v1/nothing").first, 404);
  EXPECT_EQ(call(api, "GET", "/v1/completions").first, 405);
  EXPECT_EQ(call(api, "POST", "/health").first, 405);
  EXPECT_EQ(call(api, "GET", "/metrics").first, 200);
  api.shutdown();
}

}  // namespace
}  // namespace nextn::server
