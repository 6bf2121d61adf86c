// The engine: one thread owns the model runtime and runs the queued jobs one
// at a time, first come first served. Greedy requests (temperature 0) go
// through speculative/generate.h's generate(), the same code path as
// `nextn generate`, so their tokens are identical to it; sampled requests go
// through sampled_generate(). Text is decoded incrementally (StreamDecoder)
// and cut at stop strings (StopMatcher) as tokens are committed.
#pragma once
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "io/checkpoint.h"
#include "model/runtime.h"
#include "server/job.h"
#include "server/metrics.h"
#include "speculative/generate.h"
#include "tokenizer/tokenizer.h"

namespace nextn::server {

struct EngineOptions {
  BackendKind backend = BackendKind::Cpu;
  int cpu_threads = 0;
  DraftKind draft = DraftKind::None;  // none or mtp
  int block_size = 0;                 // 0: default for the checkpoint
  ServerLimits limits;
};

class Engine {
 public:
  // Builds the runtime (sized for the longest prompt plus max_tokens) and starts the thread.
  Engine(const Qwen35Checkpoint& ckpt, const tok::Tokenizer& tokenizer, const EngineOptions& options, Metrics& metrics);
  ~Engine();
  // Queues a job; false when limits.queue_depth jobs already wait.
  bool submit(std::shared_ptr<Job> job);
  int vocab() const;

 private:
  void loop();
  void run(Job& job);
  const tok::Tokenizer& tokenizer_;
  EngineOptions options_;
  Metrics& metrics_;
  std::unique_ptr<ModelRuntime> rt_;
  std::mt19937_64 seeds_;  // seeds for requests that give none
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nextn::server
