// Shared by the engine tests (test_server_engine*.cpp, test_kv_pool.cpp): a
// job's streamed events gathered until its final one; jobs submitted by
// concurrent clients; a metric's value.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/generate.h"
#include "io/checkpoint.h"
#include "server/engine.h"
#include "server/job.h"
#include "tokenizer/tokenizer.h"

namespace nextn::server::engine_test {

struct Finished {
  std::string text, finish_reason;
  int completion_tokens = 0;
};

// Waits for the job's final event; its text is every event's text in order.
inline Finished wait(Job& job) {
  using namespace std::chrono_literals;
  Finished f;
  for (;;)
    for (JobEvent& ev : job.take(1000ms)) {
      f.text += ev.text;
      if (ev.final) {
        EXPECT_EQ(ev.error, "");
        f.finish_reason = ev.finish_reason;
        f.completion_tokens = ev.completion_tokens;
        return f;
      }
    }
}

// Every job submitted by a client thread of its own, all at once; their answers in order.
inline std::vector<Finished> serve_all(Engine& engine, const std::vector<std::shared_ptr<Job>>& jobs) {
  std::vector<Finished> got(jobs.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < jobs.size(); ++i)
    clients.emplace_back([&, i] {
      ASSERT_TRUE(engine.submit(jobs[i]));
      got[i] = wait(*jobs[i]);
    });
  for (auto& c : clients) c.join();
  return got;
}

// What a greedy request answers alone: plain greedy generation of `prompt`
// on a fresh CPU sequence of `capacity` positions, as text without a final
// EOS token (the server does not send its text).
inline std::string plain_greedy_text(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& t,
                                     const std::vector<int32_t>& prompt, int n, int capacity) {
  auto rt = make_runtime(ckpt, BackendKind::Cpu, capacity);
  auto r = greedy_generate(*rt, prompt, n, /*ignore_eos=*/false);
  const auto& eos = ckpt.config().eos_token_ids;
  if (!r.tokens.empty() && std::find(eos.begin(), eos.end(), r.tokens.back()) != eos.end()) r.tokens.pop_back();
  return t.decode(r.tokens);
}

// A metric's value as rendered ("name value"; -1 when absent).
inline double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

}  // namespace nextn::server::engine_test
