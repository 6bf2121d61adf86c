// Shared by the engine tests (test_server_engine*.cpp): a job's streamed
// events gathered until its final one.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "server/job.h"

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

}  // namespace nextn::server::engine_test
