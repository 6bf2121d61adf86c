// One call sequence that every ModelRuntime must answer the same way: the
// CPU runtime runs it in CI (test_runtime_contract.cpp), the CUDA runtime on
// the GPU (test_cuda_model.cpp, CudaModel.RuntimeContract*). A backend that
// behaves differently on any step fails here, not in a decode loop.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/runtime.h"

namespace nextn::test {

using MakeRuntime = std::function<std::unique_ptr<ModelRuntime>(int max_tokens)>;

// `f` throws nextn::Error whose message contains `words`.
inline void expect_error(const std::function<void()>& f, const std::string& words, const char* step) {
  try {
    f();
    ADD_FAILURE() << step << ": no error (expected one naming '" << words << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << step << ": " << e.what();
  }
}

// The capacity must be positive; a forward of six tokens rolled back twice
// (keep 4, then keep 2) leaves exactly two of its rows: keeping three is an
// error that changes nothing, the head and the MTP refuse rows past the two,
// and decoding on from there is bit for bit what a runtime that only ever
// saw those two tokens computes.
inline void check_runtime_contract(const MakeRuntime& make, const std::vector<int32_t>& prompt, bool has_mtp) {
  ASSERT_GE(prompt.size(), 4u);
  expect_error([&] { (void)make(0); }, "max_tokens 0 must be positive", "capacity 0");
  expect_error([&] { (void)make(-1); }, "max_tokens -1 must be positive", "capacity -1");

  const int cap = int(prompt.size()) + 16;
  auto a = make(cap), b = make(cap);
  const int V = a->config().vocab_size;
  a->target_forward(prompt);
  b->target_forward(prompt);
  const int start = int(prompt.size());
  const std::vector<int32_t> block = {prompt[1], prompt[2], prompt[3], prompt[0], prompt[2], prompt[1]};
  a->target_forward(block);
  a->target_rollback(6);  // keeps every row: nothing to undo
  EXPECT_EQ(a->target_length(), start + 6);
  a->target_rollback(4);
  EXPECT_EQ(a->target_length(), start + 4);
  a->target_rollback(2);  // the second rollback of one forward keeps a prefix of the first
  EXPECT_EQ(a->target_length(), start + 2);

  expect_error([&] { a->target_rollback(3); }, "keep 3 outside [1, 2]", "rollback past the kept rows");
  EXPECT_EQ(a->target_length(), start + 2);
  std::vector<float> la(size_t(V), 0.0f), lb(size_t(V), 0.0f);
  expect_error([&] { a->head_logits(2, la.data()); }, "row 2 outside the last forward's 2 rows", "head_logits");
  int32_t toks[4] = {};
  expect_error([&] { a->head_argmax(0, 3, toks); }, "outside the last forward's 2 rows", "head_argmax");
  if (has_mtp) {
    const std::vector<int32_t> next = {block[1], block[2], block[3]};
    expect_error([&] { mtp_of(*a).mtp_forward(next, 0); }, "rows [0, 3) outside the last forward's 2 rows", "mtp_forward");
  }
  a->target_rollback(2);  // keeps what is there: allowed, a no-op
  EXPECT_EQ(a->target_length(), start + 2);

  // The two kept rows, then three more tokens: equal to never having seen the rest.
  b->target_forward(std::vector<int32_t>(block.begin(), block.begin() + 2));
  for (int j = 0; j < 2; ++j) {
    a->head_logits(j, la.data());
    b->head_logits(j, lb.data());
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "kept row " << j;
  }
  if (has_mtp) {
    const std::vector<int32_t> next = {block[1], block[2]};
    mtp_of(*a).mtp_forward(next, 0);
    mtp_of(*b).mtp_forward(next, 0);
    int32_t da[2] = {}, db[2] = {};
    mtp_of(*a).mtp_argmax(2, da);
    mtp_of(*b).mtp_argmax(2, db);
    EXPECT_EQ(da[0], db[0]);
    EXPECT_EQ(da[1], db[1]);
  }
  const std::vector<int32_t> more = {prompt[3], prompt[0], prompt[1]};
  a->target_forward(more);
  b->target_forward(more);
  ASSERT_EQ(a->target_length(), b->target_length());
  for (int j = 0; j < 3; ++j) {
    a->head_logits(j, la.data());
    b->head_logits(j, lb.data());
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "row " << j << " after rollback";
  }
}

}  // namespace nextn::test
