// Host-callable launchers for the CUDA kernels (plain C++: the runtime in
// qwen35.cpp and the tests in tests/test_cuda_*.cpp are compiled by the host
// compiler and reach the kernels only through these).
//
// Conventions: every pointer is device memory; every launch goes to the
// given stream and is checked; nothing here synchronizes, so each launcher
// can be captured into a CUDA graph. Values that change from step to step
// (positions, the GDN buffer parity, row offsets) are read from device
// memory (`const int*`), never baked into a launch.
//
// Activations: `Act::BF16` (the default mode: matmul operands, KV cache and
// norm outputs in bf16; residual stream, matmul outputs and GDN state fp32)
// or `Act::F32` (everything fp32, matmuls on CUDA cores).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/group_entry.h"
#include "model/kv_pool.h"

namespace nextn::cuda {

enum class Act : int { BF16 = 0, F32 = 1 };
inline int act_size(Act a) { return a == Act::BF16 ? 2 : 4; }

enum class WKind : int { F32 = 0, BF16 = 1, Q4 = 2, Q8 = 3, FP8 = 4, Z4 = 5 };
// The kinds only the streamed kernel reads (the bf16 mode's transformers
// formats, docs/formats.md): their scale multiplies each group's MMA sum.
inline bool scaled_kind(WKind k) { return k == WKind::FP8 || k == WKind::Z4; }

// A weight matrix [rows][cols] (out features, in features) on the device.
// F32/BF16: `w` is row-major [rows][cols]. Q4/Q8: `w` is MLX's packed u32
// [rows][cols*bits/32] (element 32/bits*m+j of a row in bits [bits*j,
// bits*(j+1)) of word m) and scales/biases are fp32 [rows][cols/group].
// pack_quant then, once, at load: Q4 words repacked in place (element j of
// a word at bit q4_bit(j)) for the generic kernels, and, for matrices the
// streamed kernel takes (stream_eligible in matmul_stream.h), a copy in its
// stage-unit layout (`packed`), which is all the bf16 mode then reads.
// FP8 (e4m3 bytes [rows][cols], w = fp8 * scale) and Z4 (MLX-packed u32
// words, w = scale * (q - zero)): fp32 scales [rows][cols/group]; Z4's
// zeros (integers 0..16) as fp32 in `biases`; streamed only
// (stream_eligible), so pack_quant must give them the layout.
struct DevMatrix {
  WKind kind = WKind::BF16;
  int rows = 0, cols = 0, group = 0;
  const void* w = nullptr;
  const float* scales = nullptr;
  const float* biases = nullptr;
  int splits = 1;  // split-K factor: a function of (rows, cols) only, set by choose_splits
  const void* packed = nullptr;  // the streamed kernel's layout (after pack_quant), or null
  bool quant_packed = false;     // pack_quant has run
  // The scales and biases are exact in bf16 (MLX checkpoints store them so).
  // The streamed kernel reads them as bf16 pairs, so it takes only such
  // matrices; others (e.g. fp32 scales) use the generic fp32-scale kernel:
  // chosen by the matrix, never by the row count.
  bool sb_exact = true;
  // FP8 only: W8A8 (--fp8-matmul w8a8). The streamed kernel quantizes each
  // token's activations per 64 columns to e4m3 (scale = amax / 448) and
  // multiplies on the FP8 tensor cores; false: W8A16, the exact default.
  bool fp8_activations = false;
  // The rows are a SwiGLU MLP's [gate (I rows); up (I rows)] and the
  // streamed layout interleaves them: in each 16-row block of the layout,
  // rows 0..7 are gate rows j..j+7 and rows 8..15 up rows j..j+7, so one
  // lane's accumulators hold gate j and up j (matmul_stream.cu's SwiGLU
  // epilogue). Every other output is written in the checkpoint's row order.
  // Set at load (WeightUse::SwigluGateUp) for streamed matrices of rows
  // % 16 == 0; such a matrix is never split along k.
  bool swiglu_pairs = false;
};

// Bit position of element j (0..7) of a Q4 word after pack_quant: the even
// elements in the low half, the odd ones in the high half, so that one
// `(word >> 4e) & 0x000f000f` holds the pair (2e, 2e+1) as two 16-bit lanes.
constexpr int q4_bit(int j) { return (j & 1) * 16 + 4 * (j >> 1); }

// Bytes of the streamed layout pack_quant writes (0 when the matrix does
// not take the streamed kernel, or is dense).
int64_t pack_quant_bytes(const DevMatrix& m);
// Puts a Q4/Q8 matrix into the kernels' layouts (above); `dst` holds
// pack_quant_bytes(m) bytes of device memory (null: no streamed copy, for a
// matrix only read row by row). Call once per matrix, before
// any kernel reads it, with m.sb_exact and m.splits (choose_splits) set;
// synchronous on `s`.
void pack_quant(DevMatrix& m, void* dst, cudaStream_t s);

// ---- the LM head's work counters (ModelRuntime::head_work) ----
// HeadWork's fields in device memory, incremented by the kernels that do the
// work (atomics) and only copied by the runtime; they live across graph
// replays because the captured kernels increment them.
struct HeadCounters {
  unsigned long long rows_projected;        // + T by the block of the first output tile, after its k loop
  unsigned long long head_bytes_read;       // + the weight (+ scale/bias) bytes of its rows, by every block
  unsigned long long logits_bytes_written;  // + the fp32 logits it stored, by every block of a logits projection
  unsigned long long walk_rows;             // + 1 by the walk's compare step per row it takes
  unsigned long long head_calls;            // + 1 by the last kernel of a head entry point
  int last_path;                            // a HeadPath, written with rows_projected
  int pad;
};
// Where a head launch counts and the path it records; counters == null (the
// trunk, the MTP, head_logits): nothing is counted.
struct HeadTally {
  HeadCounters* counters = nullptr;
  int path = 0;
};

// The matmul family's shape rules (the only inputs are the matrix shape).
constexpr int kMaxRows = 64;     // tokens per matmul call (padded to 8 inside)
constexpr int kTileM = 64;       // output features per block of the generic kernel (the streamed one: 128)
constexpr int kChunkK = 128;     // k per main-loop step; split boundaries are multiples of it
int choose_splits(int rows, int cols, WKind kind = WKind::BF16);
// fp32 scratch a split-K call of up to max_rows rows needs, in floats (0
// when splits == 1). The caller zeroes it once, when it allocates it: its
// first floats are the streamed kernel's per-tile counters, which every call
// leaves at zero.
int64_t splitk_scratch_floats(const DevMatrix& m, int max_rows = kMaxRows);
// Checks the shape limits of the kernels (cols % 32 == 0, group >= 32); throws Error.
void check_matrix(const DevMatrix& m, const char* name);

// Y[t][n] (+)= sum_k X[t][k] * W[n][k], for t < T <= kMaxRows, n < rows.
// X is [T][ldx] of type `act`; Y is fp32 [T][ldy]. With `accumulate` the
// result is added to Y (the residual stream), once, after the full sum.
// `scratch` holds splitk_scratch_floats(W) floats (may be null if 0).
void matmul(const DevMatrix& W, const void* X, Act act, int T, int ldx, float* Y, int ldy, bool accumulate,
            float* scratch, cudaStream_t s, const HeadTally& tally = {});
// Bytes of W one projection reads, as the kernels count them into
// HeadCounters::head_bytes_read (the layout the serving kernel reads, padding
// rows of the streamed tiles included).
int64_t head_read_bytes(const DevMatrix& W, Act act);

// Projection with the argmax fused in: out[t] = argmax_n (X[t] . W[n]),
// lowest index on ties; logits are never written. Requires W.splits == 1.
// `pairs` is scratch of argmax_pairs_size(W) (value, index) pairs.
// If `stop` is non-null and *stop != 0 when the kernels start, they return
// at once (the walk's device-side early exit).
// argmax_pairs_bytes: for calls of up to max_rows rows.
int64_t argmax_pairs_bytes(const DevMatrix& W, int max_rows = kMaxRows);
// With a tally, the projection counts its rows and bytes, and the second
// pass (when `out` is given) counts one head call.
void matmul_argmax(const DevMatrix& W, const void* X, Act act, int T, int ldx, void* pairs, int32_t* out,
                   const int* stop, cudaStream_t s, const HeadTally& tally = {});

// The flag walk's compare step for row j: if *stop, nothing; else reduce the
// pairs of row 0 of the last matmul_argmax into out[j], ++*count, and set
// *stop when j == n_drafts or out[j] != drafts[j]. With counters: walk_rows
// + 1 per row taken, head_calls + 1 when it stops.
void walk_compare(const DevMatrix& W, Act act, const void* pairs, int j, const int32_t* drafts, int n_drafts,
                  int32_t* out, int* stop, int* count, cudaStream_t s, HeadCounters* counters = nullptr);

// The while walk's step (the body of a conditional WHILE graph node, or one
// host-driven iteration): j = state[0]; out[j] = best of the pairs of row 0;
// out[count_slot] = j + 1; stop when j == n_last or out[j] != drafts[j]
// (state[1] = 1, head_calls + 1); else copy row j + 1 of `rows` ([..][row_bytes])
// into `next` (the projection's fixed input) and state[0] = j + 1. With
// `handle` (use_handle != 0) it sets the WHILE condition to "not stopped".
// walk_rows + 1 per call. `state` is [2] ints, zeroed before the walk.
void walk_step(const DevMatrix& W, Act act, const void* pairs, int* state, const int32_t* drafts, int n_last,
               int32_t* out, int count_slot, const void* rows, int row_bytes, void* next, HeadCounters* counters,
               cudaGraphConditionalHandle handle, int use_handle, cudaStream_t s);

// The second pass of matmul_argmax: out[t] = best of pairs [T][n_blocks]
// (skipped when *stop); `calls` (may be null) gets head_calls + 1; and the
// walk's compare on row 0 of such pairs.
void argmax_pairs(const void* pairs, int T, int n_blocks, int32_t* out, const int* stop, cudaStream_t s,
                  HeadCounters* calls = nullptr);
void walk_compare_pairs(const void* pairs, int n_blocks, int j, const int32_t* drafts, int n_drafts, int32_t* out,
                        int* stop, int* count, cudaStream_t s, HeadCounters* counters = nullptr);
void walk_step_pairs(const void* pairs, int n_blocks, int* state, const int32_t* drafts, int n_last, int32_t* out,
                     int count_slot, const void* rows, int row_bytes, void* next, HeadCounters* counters,
                     cudaGraphConditionalHandle handle, int use_handle, cudaStream_t s);

// out[t] = argmax of logits row t ([T][ld] fp32), lowest index on ties.
// `scratch` holds argmax_scratch_bytes(V) * T bytes. `calls`: as argmax_pairs.
int64_t argmax_scratch_bytes(int V);
void argmax_rows(const float* logits, int T, int V, int ld, void* scratch, int32_t* out, cudaStream_t s,
                 HeadCounters* calls = nullptr);

// x[t][:] = row tokens[t] of the embedding E (dequantized), fp32, [T][ldx].
void embed_rows(const DevMatrix& E, const int32_t* tokens, int T, float* x, int ldx, cudaStream_t s);

// y = x / sqrt(mean(x^2) + eps) * gamma over rows of n elements; x of type
// `in_act` ([rows][ldx]), y of type `out_act` ([rows][ldy]), written from row
// *out_row0 on when out_row0 is non-null. gamma is the real multiplier.
void rmsnorm(const void* x, Act in_act, int ldx, const float* gamma, float eps, int rows, int n, void* y,
             Act out_act, int ldy, const int* out_row0, cudaStream_t s);

// A sequence's keys and values for one attention layer, in its KV blocks
// (model/kv_pool.h): block b of the table holds positions [64b, 64b + 64),
// and in it every attention layer's keys [64][Hkv][hd] then values [64][Hkv][hd]
// (of the activation type), layer by layer: this layer's keys start
// layer * 2 * 64 * Hkv * hd elements into the block.
struct KvBlocks {
  void* const* table = nullptr;  // device: the sequence's block table
  int layer = 0;
};

// Gated attention, per-token half (model-spec A.5): q/k RMSNorm per head,
// partial rotate-half RoPE at position *pos + t, K and V stored into the
// cache rows *pos + t (of type `act`), q into qout fp32 [T][Hq][hd]. proj is
// fp32 [T][ld] holding [q|gate interleaved per head (Hq*2*hd) | k (Hkv*hd) |
// v (Hkv*hd)]. inv_freq: rd/2 floats.
struct AttnShape {
  int Hq, Hkv, hd, rd;
  float eps;
};
void attn_prepare(const AttnShape& a, const float* proj, int ld, int T, const float* q_norm, const float* k_norm,
                  const float* inv_freq, const int* pos, float* qout, KvBlocks kv, Act act, cudaStream_t s);

// Causal attention of T <= kMaxRows queries (absolute positions *pos + t)
// over cache rows [0, *pos + t], keys split at fixed 256-key boundaries, the
// splits combined in split order; then o * sigmoid(gate) into out
// ([T][Hq*hd] of type `act`), in one launch. gate is read from proj as in
// attn_prepare. `partial` holds attn_partial_floats(a, max_tokens, rows)
// floats for calls of up to `rows` queries; it starts with the per-query
// counters of the splits' blocks (attn_counter_bytes), which the caller
// zeroes once, when it allocates the buffer: each call leaves them at zero.
constexpr int kAttnSplit = 256;
int64_t attn_partial_floats(const AttnShape& a, int max_tokens, int max_rows = kMaxRows);
int64_t attn_counter_bytes(const AttnShape& a);
void attention(const AttnShape& a, const float* q, KvBlocks kv, Act act, const float* proj, int ld, int T,
               const int* pos, int max_tokens, float* partial, void* out, cudaStream_t s);

// The same attention for a prefill chunk of T (any number of) queries, bf16
// mode only (caches and out bf16), on tensor cores (attention_prefill.cu):
// close to attention() but not bitwise (q and the softmax weights rounded
// to bf16, another summation order). For head_dim 64, 128 or 256 (check
// attention_prefill_supports first).
bool attention_prefill_supports(const AttnShape& a);
void attention_prefill(const AttnShape& a, const float* q, KvBlocks kv, const float* proj, int ld, int T,
                       const int* pos, void* out, cudaStream_t s);

// out[t][i] = silu(gu[t][i]) * gu[t][I + i], to type `act` ([T][ldo]).
void swiglu(const float* gu, int ld, int I, int T, void* out, Act act, int ldo, cudaStream_t s);

// ---- Gated DeltaNet (model-spec A.4) ----
struct GdnShape {
  int Hk, Hv, dk, dv, K;  // K: conv kernel size
  float eps;
  constexpr int conv_dim() const { return 2 * Hk * dk + Hv * dv; }
};
// One GDN layer's device pointers (a table of these lives in device memory).
struct GdnLayer {
  const float* proj;   // [rows][proj_ld]: mixed qkv (conv_dim) | z (Hv*dv) | b (Hv) | a (Hv), fp32
  float* conv_out;     // [rows][conv_dim]: post-conv q | k | v (q, k l2-normalised; q scaled)
  float* conv_state;   // 2 buffers of [K-1][conv_dim] pre-conv rows, oldest first
  float* S;            // 2 buffers of [Hv][dk][dv] fp32
  const float* conv_w; // [conv_dim][K]
  const float* a_log;  // [Hv]
  const float* dt_bias;
  const float* norm_w; // [dv]
  void* y;             // [rows][Hv*dv] of the activation type: gated-norm output
  int proj_ld;
};
// Conv over T tokens: reads conv_state[*parity ^ invert] and proj rows,
// writes conv_out (unless skip_out) and the new state into the other buffer.
// With q/k l2norm (+ q scale) fused. One layer: table + layer.
void gdn_conv(const GdnShape& g, const GdnLayer* table, int layer, int n_layers, int T, const int* parity,
              int invert, bool skip_out, cudaStream_t s);
// The recurrence token by token from S[*parity ^ invert] into S[other]; for
// each token the gated RMSNorm output y (unless replay). Layers
// [layer, layer + n_layers) of the table, one block per (value head, layer).
void gdn_recurrence(const GdnShape& g, const GdnLayer* table, int layer, int n_layers, int T, const int* parity,
                    int invert, bool replay, Act act, cudaStream_t s);
// gdn_conv(..., T, parity, 0, false) then gdn_recurrence(..., T, parity, 0,
// false) of one layer in one launch, the same bits in every buffer they
// write, for decode and verify widths (gdn_step_fits: T <= kGdnStepRows,
// as the streamed folds: a K <= 7 verify block runs both in one launch) and
// a conv of at most 4 taps (Qwen3.5's).
constexpr int kGdnStepRows = 8;
bool gdn_step_fits(const GdnShape& g, int T);
void gdn_step(const GdnShape& g, const GdnLayer* table, int layer, int T, const int* parity, Act act, cudaStream_t s);

// One sequence's rollback in a group (gdn_rollback_group): its GDN table,
// its parity and the tokens of its last chunk to replay (T < 0: padding).
struct GdnReplay {
  const GdnLayer* gdn = nullptr;
  const int* parity = nullptr;
  int T = -1;
};
// gdn_conv(..., T, parity, 1, skip_out) and gdn_recurrence(..., T, parity,
// 1, replay) of layers [0, n_layers) for every entry, in one launch: each
// sequence's conv state and S replayed from its untouched buffers over its
// own T tokens, bit for bit as its own rollback.
void gdn_rollback_group(const GdnShape& g, const GdnReplay* entries, int n_entries, int n_layers, cudaStream_t s);

// The same recurrence for a prefill chunk of T tokens, one layer, bf16 mode
// (gdn_prefill.cu): not bitwise equal to gdn_recurrence (4 row parts per
// column, fused multiply-adds), the gated norm in a second kernel.
// o_scratch: [T][Hv*dv] fp32, the raw outputs between the two.
void gdn_prefill_recurrence(const GdnShape& g, const GdnLayer* table, int layer, int T, const int* parity,
                            float* o_scratch, cudaStream_t s);

// dst[r][:] = r < *n_real ? src[*first + r][:] : 0 for r < width, elements of `act`.
void gather_rows(const void* src, int n, const int* first, const int* n_real, int width, void* dst, Act act,
                 cudaStream_t s);

// ---- group passes (docs/cuda-backend.md, "Several sequences") ----
// Several sequences' rows in one pass: the row-wise ops run over all rows,
// these over each entry of a device table (group_entry.h) of n_entries
// entries, max_T at least every entry's T; each entry's rows get exactly the
// bits the one-sequence kernels above give them.
//
// attn_prepare + attention for every entry: proj, q and out rows at the
// entry's rows of the pass; its own caches (layer kv_layer), position and
// partials.
void attention_group(const AttnShape& a, const GroupEntry* entries, int n_entries, int max_T, int kv_layer,
                     const float* proj, int ld, const float* q_norm, const float* k_norm, const float* inv_freq,
                     float* q, void* out, Act act, cudaStream_t s);
// GDN layer `layer` for every entry: its rows of the in-projection `proj`
// (ld: its table's proj_ld) into its own proj rows, then gdn_conv and
// gdn_recurrence on its own state and parity, y into its rows of `y`.
void gdn_group(const GdnShape& g, const GroupEntry* entries, int n_entries, int max_T, int layer, const float* proj,
               void* y, Act act, cudaStream_t s);
// dst rows [row, row + T) of each entry = its `in` rows from *first_row
// (zeros past *n_real), as gather_rows; and the reverse, src rows into its
// `out` rows from *out_row. Rows of n elements of `act`.
void gather_rows_group(const GroupEntry* entries, int n_entries, int max_T, int n, void* dst, Act act,
                       cudaStream_t s);
void scatter_rows_group(const GroupEntry* entries, int n_entries, int max_T, int n, const void* src, Act act,
                        cudaStream_t s);

// Device properties the kernels need (multiprocessor count, shared memory
// opt-in); call once per process, before capturing graphs.
void init_kernels();

}  // namespace nextn::cuda
