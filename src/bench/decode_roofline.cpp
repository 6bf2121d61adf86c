#include "bench/decode_roofline.h"

#include <fmt/format.h>

#include <algorithm>

#include "io/checkpoint.h"
#include "model/bench_interfaces.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/device_stats.h"
#endif

namespace nextn::bench {

namespace {

constexpr double kGiB = double(uint64_t(1) << 30);

bool quant_side(const std::string& n) { return n.ends_with(".scales") || n.ends_with(".biases"); }

// Bytes of one tensor as the budget counts it: as stored, except 1-D float
// vectors (norms, A_log, dt_bias), which the kernels read in fp32. Quantized
// scales and biases count as stored (bf16): the streamed layout holds them
// so, and whatever a backend widens is overhead, not weights.
uint64_t device_bytes(const TensorView& t) {
  if (!quant_side(t.name) && t.shape.size() == 1 && dtype_size(t.dtype) == 2) return t.nbytes * 2;
  return t.nbytes;
}

#ifdef NEXTN_HAVE_CUDA
// Forwards every ModelRuntime method but reserve_step (a new virtual must be
// added here too; reserve_step keeps the base's token check, as it always
// has here) and the bench interfaces (model/bench_interfaces.h) to the
// wrapped CUDA runtime; the MTP head is the wrapped runtime's own (mtp()
// hands it out, so its device draft chain runs as is). Records device
// memory in use after creation, after each forward of more than
// kMaxForwardRows tokens (a prompt: its prefill workspace is still held
// then; the runtime releases it at the next forward) and before destruction.
class MemoryProbe final : public ModelRuntime, public VerifyHeadArms, public RuntimeProbe {
 public:
  MemoryProbe(std::unique_ptr<ModelRuntime> rt, DeviceFigures* fig, int cap, int rows)
      : rt_(std::move(rt)), fig_(fig), cap_(cap), rows_(rows) {
    sample();
  }
  ~MemoryProbe() override {
    try {
      sample();
    } catch (...) {
    }
  }
  const Qwen35Config& config() const override { return rt_->config(); }
  ModelInfo info() const override { return rt_->info(); }
  const char* backend_name() const override { return rt_->backend_name(); }
  int target_length() const override { return rt_->target_length(); }
  void target_forward(std::span<const int32_t> t) override {
    rt_->target_forward(t);
    if (t.size() > size_t(kMaxForwardRows)) sample();
  }
  void target_rollback(int keep) override { rt_->target_rollback(keep); }
  void head_argmax(int first, int count, int32_t* out) override { rt_->head_argmax(first, count, out); }
  void head_logits(int row, float* out) override { rt_->head_logits(row, out); }
  HeadWork head_work() const override { return rt_->head_work(); }
  void reset() override { rt_->reset(); }
  MtpHead* mtp() override { return rt_->mtp(); }

  void head_argmax_padded(int first, int count, int width, int32_t* out) override {
    verify_arms_of(*rt_).head_argmax_padded(first, count, width, out);
  }
  void head_argmax_fused(int first, int count, int32_t* out) override {
    verify_arms_of(*rt_).head_argmax_fused(first, count, out);
  }
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override {
    return verify_arms_of(*rt_).head_walk(drafts, out);
  }

  std::vector<OpTiming> op_timings() const override { return probe().op_timings(); }
  void clear_op_timings() override { probe_of(*rt_).clear_op_timings(); }
  int64_t kernels_launched() const override { return probe().kernels_launched(); }
  uint64_t expert_bytes_read() const override { return probe().expert_bytes_read(); }
  int64_t host_syncs() const override { return probe().host_syncs(); }
  std::vector<MemoryUse> device_memory() const override { return probe().device_memory(); }

 private:
  void sample() {
    const size_t used = cuda_stats::device_memory_used();
    const uint64_t d = used > fig_->baseline_used ? used - fig_->baseline_used : 0;
    if (d > fig_->peak_runtime) {
      fig_->peak_runtime = d;
      fig_->peak_capacity = cap_;
      fig_->runtime_rows = rows_;
      fig_->peak_uses = probe().device_memory();
    }
  }
  const RuntimeProbe& probe() const { return probe_of(*rt_); }
  std::unique_ptr<ModelRuntime> rt_;
  DeviceFigures* fig_;
  int cap_, rows_;
};
#endif

}  // namespace

DecodeBytes decode_bytes(const Qwen35Checkpoint& ck) {
  DecodeBytes b;
  const bool tied = !ck.store().find(ck.stored_name("lm_head") + ".weight");
  uint64_t embed = 0;
  for (const auto& name : ck.store().names()) {
    const TensorView& t = ck.store().get(name);
    const auto logical = ck.logical_name(name);
    if (!logical) continue;
    b.stored_total += t.nbytes;
    b.device_weights += device_bytes(t);
    const std::string& l = *logical;
    const bool routed = l.find(".mlp.experts.") != std::string::npos || l.find(".mlp.switch_mlp.") != std::string::npos;
    if (l.starts_with("mtp.")) b.mtp += t.nbytes;
    else if (l.starts_with("embed_tokens.")) embed += t.nbytes;
    else if (l.starts_with("lm_head.")) b.head += t.nbytes;
    else if (routed) b.experts_stored += t.nbytes;
    else b.trunk += t.nbytes;  // layers.*, norm.weight
  }
  // A token reads k of each layer's E routed experts (the active bytes).
  const auto& c = ck.config();
  if (c.moe) b.trunk += b.experts_stored * uint64_t(c.num_experts_per_tok) / uint64_t(c.num_experts);
  if (tied) b.head = embed;
  b.embed_row = embed / uint64_t(std::max(1, ck.config().vocab_size));
  return b;
}

MemoryBudget memory_budget(const Qwen35Checkpoint& ck, int max_tokens) {
  const auto& c = ck.config();
  MemoryBudget m;
  m.weights = decode_bytes(ck).device_weights;
  int full = 0, gdn = 0;
  for (bool f : c.full_attention) (f ? full : gdn) += 1;
  full += ck.mtp_layers() > 0 ? 1 : 0;
  m.kv = uint64_t(full) * 2 * uint64_t(max_tokens) * uint64_t(c.num_key_value_heads) * uint64_t(c.head_dim) * 2;
  const uint64_t S = uint64_t(c.linear_num_value_heads) * c.linear_key_head_dim * c.linear_value_head_dim * 4;
  const uint64_t conv = uint64_t(std::max(0, c.linear_conv_kernel_dim - 1)) * uint64_t(c.conv_dim()) * 4;
  m.gdn_state = uint64_t(gdn) * 2 * (S + conv);
  return m;
}

RuntimeFactory probe_memory(RuntimeFactory inner, DeviceFigures* fig, int rows) {
#ifdef NEXTN_HAVE_CUDA
  return [inner = std::move(inner), fig, rows](int cap) -> std::unique_ptr<ModelRuntime> {
    return std::make_unique<MemoryProbe>(inner(cap), fig, cap, rows);
  };
#else
  (void)fig;
  (void)rows;
  return inner;
#endif
}

void measure_device(DeviceFigures* fig) {
#ifdef NEXTN_HAVE_CUDA
  fig->copy_gbs = cuda_stats::copy_bandwidth_gbs(size_t(2) << 30, 10);
  fig->baseline_used = cuda_stats::device_memory_used();
  fig->valid = true;
#else
  (void)fig;
#endif
}

std::string roofline_text(const DecodeBytes& b, const MemoryBudget& m, const DeviceFigures& f,
                          double decode_tps_median, int decode_capacity) {
  std::string s = fmt::format(
      "bytes per decode token: {:.3f} GiB (trunk {:.3f} + LM head {:.3f} GiB incl. scales/biases + one embedding "
      "row {} B); MTP head {:.3f} GiB not read\n",
      double(b.per_token()) / kGiB, double(b.trunk) / kGiB, double(b.head) / kGiB, b.embed_row, double(b.mtp) / kGiB);
  if (b.experts_stored > 0)
    s += fmt::format("routed experts: {:.3f} GiB stored; the trunk counts the top-k share a token reads (active bytes)\n",
                     double(b.experts_stored) / kGiB);
  if (f.host.gbs > 0) {
    // The CPU holds bf16 and quantized weights as stored (fp32 and f16 ones
    // widened to fp32: then it reads more than counted here).
    const double roof = f.host.gbs * 1e9 / double(b.per_token());
    s += fmt::format("host copy bandwidth ({} threads, {:.1f} MiB buffer = the bytes a decode token reads, best of 20, "
                     "read+write): {:.1f} GB/s\n",
                     f.host.threads, double(f.host.bytes) / double(1 << 20), f.host.gbs);
    s += fmt::format("memory floor {:.1f} tokens/s; decode median {:.1f} tokens/s = {:.1f}% of the floor\n", roof,
                     decode_tps_median, 100.0 * decode_tps_median / roof);
  }
  if (!f.valid) return s;
  const double roof = f.copy_gbs * 1e9 / double(b.per_token());
  s += fmt::format("copy bandwidth (d2d, 2 GiB, best of 10, read+write): {:.0f} GB/s\n", f.copy_gbs);
  s += fmt::format("roofline {:.1f} tokens/s; decode median {:.1f} tokens/s = {:.1f}% of roofline\n", roof,
                   decode_tps_median, 100.0 * decode_tps_median / roof);
  const double limit = 1.10 * double(m.total());
  s += fmt::format(
      "peak device memory {:.3f} GiB (over the {:.3f} GiB in use before; runtime capacity {} tokens{}); budget "
      "weights {:.3f} + KV {:.3f} + GDN/speculative state {:.3f} = {:.3f} GiB; peak/budget {:.3f} ({} the 1.10 "
      "limit)\n",
      double(f.peak_runtime) / kGiB, double(f.baseline_used) / kGiB, f.peak_capacity,
      f.runtime_rows > 0 ? fmt::format(", {} rows per forward", f.runtime_rows) : std::string(), double(m.weights) / kGiB,
      double(m.kv) / kGiB, double(m.gdn_state) / kGiB, double(m.total()) / kGiB,
      double(f.peak_runtime) / double(std::max<uint64_t>(1, m.total())), double(f.peak_runtime) <= limit ? "within" : "OVER");
  if (!f.peak_uses.empty()) {
    // Where the peak went: the runtime's own allocations per use, and what
    // the driver and libraries took besides (graphs, kernel modules, cuBLAS).
    uint64_t own = 0;
    std::string uses;
    for (const auto& u : f.peak_uses) {
      own += u.bytes;
      if (u.bytes >= (uint64_t(1) << 20)) uses += fmt::format("{}{} {:.1f}", uses.empty() ? "" : ", ", u.what, double(u.bytes) / double(1 << 20));
    }
    const uint64_t other = f.peak_runtime > own ? f.peak_runtime - own : 0;
    s += fmt::format("at the peak: nextn's allocations {:.3f} GiB (MiB: {}); outside them (CUDA graphs, kernel modules, "
                     "cuBLAS, driver) {:.3f} GiB\n",
                     double(own) / kGiB, uses, double(other) / kGiB);
  }
  (void)decode_capacity;
  return s;
}

nlohmann::ordered_json roofline_json(const DecodeBytes& b, const MemoryBudget& m, const DeviceFigures& f,
                                     double decode_tps_median) {
  nlohmann::ordered_json j;
  j["bytes_per_token"] = b.per_token();
  j["trunk_bytes"] = b.trunk;
  j["routed_expert_bytes_stored"] = b.experts_stored;
  j["head_bytes"] = b.head;
  j["embed_row_bytes"] = b.embed_row;
  j["mtp_bytes"] = b.mtp;
  j["device_weight_bytes"] = b.device_weights;
  if (f.host.gbs > 0) {
    const double roof = f.host.gbs * 1e9 / double(b.per_token());
    j["host_copy"] = {{"gbs", f.host.gbs}, {"buffer_bytes", f.host.bytes}, {"threads", f.host.threads}};
    j["memory_floor_tokens_per_second"] = roof;
    j["fraction_of_memory_floor"] = decode_tps_median / roof;
  }
  if (f.valid) {
    const double roof = f.copy_gbs * 1e9 / double(b.per_token());
    j["copy_gbs"] = f.copy_gbs;
    j["roofline_tokens_per_second"] = roof;
    j["fraction_of_roofline"] = decode_tps_median / roof;
    j["peak_device_bytes"] = f.peak_runtime;
    if (f.runtime_rows > 0) j["runtime_rows"] = f.runtime_rows;
    j["baseline_device_bytes"] = f.baseline_used;
    j["peak_capacity"] = f.peak_capacity;
    nlohmann::ordered_json uses = nlohmann::ordered_json::object();
    for (const auto& u : f.peak_uses) uses[u.what] = u.bytes;
    j["peak_allocations"] = uses;
    j["budget"] = {{"weights", m.weights}, {"kv", m.kv}, {"gdn_state", m.gdn_state}, {"total", m.total()}};
    j["peak_over_budget"] = double(f.peak_runtime) / double(std::max<uint64_t>(1, m.total()));
  }
  return j;
}

}  // namespace nextn::bench
