// Private to the CPU Gemma 4 runtime (gemma4.cpp: weights, trunk, head;
// gemma4_group.cpp: the sequence group): the model every sequence of a group
// shares and the one-sequence runtime over it, as for Qwen3.5
// (qwen35_model.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/gemma4.h"
#include "backend/cpu/gemma4_layer.h"
#include "backend/cpu/head.h"
#include "core/thread_pool.h"
#include "model/batch_runtime.h"
#include "model/bench_interfaces.h"
#include "model/gemma4_runtime.h"

namespace nextn::cpu_gemma4 {

using cpu::Gemma4Layer;
using cpu::Matrix;
using MatrixPtr = std::shared_ptr<Matrix>;

// Rows of one sequence per forward chunk (the largest verify block). The
// sliding rings hold kMaxRows slots past the window, so a chunk's writes
// never overwrite a key that one of its queries, or a rollback, still needs.
constexpr int kMaxRows = 64;

// One layer's keys and values in a sequence's KV blocks (model/kv_pool.h):
// position p at slot p % slots (full layers: slots = the capacity, no wrap;
// sliding layers: a ring), slot s in block s / kKvBlockTokens of the
// layer's table (the full-attention layers' or the sliding layers'). A
// block holds, per layer of its kind in order, keys [kKvBlockTokens][row]
// then values.
struct LayerKv {
  void* const* blocks = nullptr;  // the sequence's table for this layer's kind (KvBlockTable::data)
  size_t k_at = 0, v_at = 0;      // floats from a block's start to this layer's keys, values
  size_t row = 0;                 // floats per position: kv_heads * head_dim
  int slots = 0;
  float* key(int pos) const { return at(pos) + k_at; }
  float* value(int pos) const { return at(pos) + v_at; }
  float* at(int pos) const {
    const int s = pos % slots;
    return static_cast<float*>(blocks[s / kKvBlockTokens]) + size_t(s % kKvBlockTokens) * row;
  }
};

// One sequence's rows inside a layer call over the rows of several
// sequences: rows [row0, row0 + T) of the call, at positions pos.. of that
// sequence, whose keys and values for this layer are kv.
struct Segment {
  const LayerKv* kv = nullptr;
  int pos = 0, row0 = 0, T = 0;
};

// What every sequence of a group shares: the config, the weights, the
// thread pool. Layer calls take the rows of one or more sequences: the
// matrix products run over all rows at once (each output element is summed
// in gemm.h's fixed order, so a row's values do not depend on its neighbours), the norms and
// RoPE per row, attention per sequence over its own ring.
struct Gemma4Model {
  Gemma4Model(const Gemma4Checkpoint& ck, const CpuRuntimeOptions& options);

  // Error unless a sequence of max_tokens positions fits max_position_embeddings.
  void check_capacity(int max_tokens) const;
  void scaled_embedding(int32_t token, float* out) const;
  // Layer i over N rows x [N][H] (in place) of the segments' sequences.
  void layer(size_t i, std::span<const Segment> segs, int N, float* x);
  void attention(const Gemma4Layer& L, std::span<const Segment> segs, int N, const float* xn, float* out);
  void matmul(const Matrix& w, const float* x, int T, float* y) {
    cpu::matmul(w, x, T, y, 0, -1, &pool, min_chunk_work);
  }
  cpu::HeadThreads head_threads() { return {&pool, min_chunk_work}; }

  // The pools of the full layers' blocks and of the sliding rings' (null
  // where no layer is of that kind), and their use (model/kv_pool.h).
  std::vector<KvPoolUse> kv_pools() const;

  std::string dir;  // for messages
  Gemma4TextConfig cfg;
  ModelInfo info;
  ThreadPool pool;
  int64_t min_chunk_work;
  MatrixPtr embed, lm_head;  // [vocab, H]; lm_head is embed when tied
  float embed_scale = 1.0f;
  std::vector<float> final_norm;  // [H]
  std::vector<Gemma4Layer> layers;
  std::vector<size_t> kv_at;  // per layer: floats from its kind's block start to its keys (values follow)
  std::unique_ptr<KvBlockPool> full_pool, ring_pool;
};

// One sequence: its rings, hidden rows and head counters over a shared model.
class CpuGemma4 final : public Gemma4Runtime, public VerifyHeadArms {
 public:
  CpuGemma4(std::shared_ptr<Gemma4Model> model, int max_tokens);
  ~CpuGemma4() override = default;

  ModelInfo info() const override { return m_->info; }
  const char* backend_name() const override { return "cpu"; }
  void target_forward(std::span<const int32_t> tokens) override;
  void target_rollback(int keep) override;
  // The product's head: exactly its rows (the padded arm at width count).
  void head_argmax(int first, int count, int32_t* out) override { head_argmax_padded(first, count, count, out); }
  void head_logits(int row, float* out) override;
  HeadWork head_work() const override { return head_work_; }
  void reset() override;

  // ---- VerifyHeadArms (model/bench_interfaces.h) ----
  void head_argmax_padded(int first, int count, int width, int32_t* out) override;
  void head_argmax_fused(int first, int count, int32_t* out) override;
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override;

  // ---- Gemma4Target ----
  const Gemma4TextConfig& gemma4_config() const override { return m_->cfg; }
  void last_hidden(float* out) const override;
  void scaled_embedding(int32_t token, float* out) const override { m_->scaled_embedding(token, out); }
  const float* cached_key(int layer, int pos) const override { return cached(layer, pos, true); }
  const float* cached_value(int layer, int pos) const override { return cached(layer, pos, false); }

  const Gemma4Model* model() const { return m_.get(); }
  // target_forward(tokens[s]) on seqs[s]: one trunk forward per chunk of 64
  // rows of each sequence over all of them; every sequence is checked
  // (distinct, of one model, token ids, capacity) before any changes.
  static void forward_together(std::span<CpuGemma4* const> seqs, std::span<const std::span<const int32_t>> tokens);
  // head_argmax(r.first, r.count) of every listed row, one
  // projection for all of them.
  static void head_argmax_together(std::span<CpuGemma4* const> seqs, std::span<const SequenceRows> rows,
                                   int32_t* out);

 private:
  void check_forward(std::span<const int32_t> tokens) const;
  const float* cached(int layer, int pos, bool key) const;
  // Gemma4Runtime::hold_forward (rings: blocks up to their slots).
  void hold_forward(int T) override;

  std::shared_ptr<Gemma4Model> m_;
  // The KV block tables of the full layers and the sliding rings (kv_ reads them in place).
  KvBlockTable full_kv_, ring_kv_;
  int ring_slots_ = 0;
  std::vector<LayerKv> kv_;    // per layer
  std::vector<float> hidden_;  // [last_T][H], post final norm
  HeadWork head_work_;         // counted by the head ops (backend/cpu/head.h)
};

}  // namespace nextn::cpu_gemma4
