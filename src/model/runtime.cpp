#include "model/runtime.h"

#include <algorithm>

#include "backend/cpu/qwen35.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/bench_interfaces.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"
#endif

namespace nextn {

const char* head_path_name(HeadPath path) {
  switch (path) {
    case HeadPath::None: return "none";
    case HeadPath::Batched: return "batched";
    case HeadPath::Padded: return "padded";
    case HeadPath::Fused: return "fused";
    case HeadPath::Walk: return "walk";
    case HeadPath::WalkFlag: return "walk-flag";
  }
  return "?";
}

const Qwen35Config& ModelRuntime::config() const {
  fail("internal: this {} runtime is not a Qwen3.5 runtime (no Qwen3.5 config)", backend_name());
}

ModelInfo ModelRuntime::info() const { return qwen35_info(config()); }

ModelInfo qwen35_info(const Qwen35Config& c) {
  ModelInfo i;
  i.vocab_size = c.vocab_size;
  i.hidden_size = c.hidden_size;
  i.max_position_embeddings = c.max_position_embeddings;
  i.mtp_layers = c.mtp_num_hidden_layers;  // set from the tensors by Qwen35Checkpoint::open
  i.eos_token_ids = c.eos_token_ids;
  return i;
}

void MtpHead::mtp_draft(int n, int32_t* out) {
  if (n <= 0) return;
  mtp_argmax(1, &out[0]);
  for (int i = 1; i < n; ++i) {
    mtp_step(out[i - 1]);
    mtp_argmax(1, &out[i]);
  }
}

MtpHead& mtp_of(ModelRuntime& rt) {
  if (MtpHead* head = rt.mtp()) return *head;
  fail("internal: this {} runtime has no MTP head", rt.backend_name());
}

VerifyHeadArms& verify_arms_of(ModelRuntime& rt) {
  if (auto* arms = dynamic_cast<VerifyHeadArms*>(&rt)) return *arms;
  fail("the {} runtime has no verify head arms (padded, fused, walk: bench verify)", rt.backend_name());
}

RuntimeProbe* find_probe(ModelRuntime& rt) { return dynamic_cast<RuntimeProbe*>(&rt); }
const RuntimeProbe* find_probe(const ModelRuntime& rt) { return dynamic_cast<const RuntimeProbe*>(&rt); }

const RuntimeProbe& probe_of(const ModelRuntime& rt) {
  if (const RuntimeProbe* probe = find_probe(rt)) return *probe;
  fail("the {} runtime has no profiling probe (op timings, kernels launched, device memory)", rt.backend_name());
}

RuntimeProbe& probe_of(ModelRuntime& rt) {
  return const_cast<RuntimeProbe&>(probe_of(static_cast<const ModelRuntime&>(rt)));
}

int effective_draft_vocab(int n, int vocab) {
  if (n < 0) fail("--draft-vocab {}: expected a token count of at least 1 (0: the whole vocabulary)", n);
  return n == 0 || n >= vocab ? vocab : n;
}

void ModelRuntime::reserve_step(std::span<const int32_t> tokens, int) {
  const int V = vocab();
  for (int32_t t : tokens)
    if (t < 0 || t >= V) fail("token id {} is outside the vocabulary [0, {})", t, V);
}

void check_backend_options(BackendKind kind, const RuntimeOptions& options) {
  const int degree = options.tensor_parallel;
  if (options.fp8_matmul == Fp8Matmul::W8A8 && kind != BackendKind::Cuda)
    fail("--fp8-matmul w8a8: the CPU backend runs FP8 weights as W8A16 (dequantized, fp32 activations); W8A8 is a "
         "--backend cuda kernel");
  if (options.fp8_matmul == Fp8Matmul::W8A8 && options.act == Activations::Fp32)
    fail("--fp8-matmul w8a8: --act fp32 runs every weight dequantized in fp32; W8A8 is a bf16-mode kernel");
  if (degree < 1) fail("--tensor-parallel {}: expected a degree of at least 1", degree);
  if (kind == BackendKind::Cuda && degree != 1)
    fail("--tensor-parallel {}: --backend cuda runs on one GPU; tensor parallelism over several GPUs (NCCL) is not "
         "implemented (it runs on --backend cpu, docs/tensor-parallel.md)",
         degree);
}

BackendKind parse_backend(const std::string& name) {
  if (name == "cpu") return BackendKind::Cpu;
  if (name == "cuda") return BackendKind::Cuda;
  fail("--backend: unknown backend '{}' (expected cpu or cuda)", name);
}

std::unique_ptr<ModelRuntime> make_runtime(const Qwen35Checkpoint& ckpt, BackendKind kind, int max_tokens,
                                           const RuntimeOptions& options, int max_rows) {
  if (max_tokens <= 0) fail("runtime capacity {} tokens: expected at least 1", max_tokens);
  if (max_rows < 1 || max_rows > kMaxForwardRows)
    fail("runtime rows per forward {}: expected 1 to {}", max_rows, kMaxForwardRows);
  // The capacity bounds every position a run can reach (prompt + new tokens
  // + one verify block of slack); the model was trained up to this limit.
  const int limit = ckpt.config().max_position_embeddings;
  if (max_tokens > limit)
    fail("{}: this run needs up to {} positions (prompt + tokens to generate + verify block) but config.json's "
         "max_position_embeddings is {}",
         ckpt.dir(), max_tokens, limit);
  check_backend_options(kind, options);
  if (kind == BackendKind::Cpu) return make_cpu_runtime(ckpt, max_tokens, cpu_options(options));
#ifdef NEXTN_HAVE_CUDA
  return make_cuda_runtime(ckpt, max_tokens, max_rows, options);
#else
  fail("--backend cuda: this nextn was built without the CUDA backend (no nvcc at build time, or -DNEXTN_CUDA=OFF)");
#endif
}

}  // namespace nextn
