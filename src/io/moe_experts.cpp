// MoE expert tensors (Qwen3.5, Gemma 4): layout detection and one expert's matrices as
// WeightRefs, per expert or sliced out of the stacked tensors.
#include "io/moe_experts.h"

#include <memory>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

namespace nextn {

namespace {

const TensorView& stacked_tensor(const TensorStore& store, const std::string& dir, const std::string& name,
                                 const std::vector<int64_t>& want, bool packed) {
  const TensorView* t = store.find(name);
  if (!t) fail("{}: missing tensor '{}'", dir, name);
  if (packed ? t->dtype != DType::U32 : !is_float_dtype(t->dtype))
    fail("{}: tensor '{}': dtype {}, expected {}", dir, name, dtype_name(t->dtype),
         packed ? "U32 (packed, '.scales' is stored)" : "F32, BF16 or F16");
  if (t->shape != want)
    fail("{}: tensor '{}': shape {}, expected {}", dir, name, shape_text(t->shape), shape_text(want));
  return *t;
}

// Rows [row0, row0 + rows) of slice `expert` of a [E, R, cols] tensor, as a
// [rows, cols] view of the same bytes.
TensorView slice_view(const TensorView& t, int expert, int64_t row0, int64_t rows) {
  const int64_t R = t.shape[1], cols = t.shape[2];
  const size_t elt = dtype_size(t.dtype);
  TensorView v;
  v.name = fmt::format("{}[{}][{}:{}]", t.name, expert, row0, row0 + rows);
  v.dtype = t.dtype;
  v.shape = {rows, cols};
  v.data = t.data + (size_t(expert) * size_t(R) + size_t(row0)) * size_t(cols) * elt;
  v.nbytes = size_t(rows) * size_t(cols) * elt;
  v.file = t.file;
  return v;
}

// Expert `expert`'s rows [row0, row0 + rows) of the stacked module `mod`
// ([E, R, cols] logical; `<mod>` itself or `<mod>.weight` when `suffixed`),
// dense or MLX affine.
WeightRef stacked_slice(const TensorStore& store, const QuantConfig& quant, const std::string& dir,
                        const std::string& mod, bool suffixed, int expert, int64_t E, int64_t R, int64_t row0,
                        int64_t rows, int64_t cols) {
  WeightRef w;
  w.rows = rows;
  w.cols = cols;
  const std::string weight_name = suffixed ? mod + ".weight" : mod;
  auto views = std::make_shared<SliceViews>();
  const TensorView* scales = suffixed ? store.find(mod + ".scales") : nullptr;
  if (!scales) {
    views->weight = slice_view(stacked_tensor(store, dir, weight_name, {E, R, cols}, false), expert, row0, rows);
  } else {
    if (!quant.present)
      fail("{}: tensor '{}.scales' is stored but config.json has no 'quantization' (bits, group_size)", dir, mod);
    const auto q = quant.for_module(mod);
    if (!q) fail("{}: tensor '{}.scales' is stored but config.json's quantization marks '{}' as not quantized", dir, mod,
                 mod);
    if (cols % q->group_size != 0)
      fail("{}: tensor '{}': {} input columns are not a multiple of the group size {}", dir, weight_name, cols,
           q->group_size);
    w.quant = *q;
    views->weight = slice_view(stacked_tensor(store, dir, weight_name, {E, R, cols * q->bits / 32}, true), expert,
                               row0, rows);
    const std::vector<int64_t> groups{E, R, cols / q->group_size};
    views->scales = slice_view(stacked_tensor(store, dir, mod + ".scales", groups, false), expert, row0, rows);
    views->biases = slice_view(stacked_tensor(store, dir, mod + ".biases", groups, false), expert, row0, rows);
  }
  w.name = views->weight.name;
  w.weight = &views->weight;
  if (scales) {
    w.scales = &views->scales;
    w.biases = &views->biases;
  }
  w.slice = std::move(views);
  return w;
}

}  // namespace

const char* expert_layout_name(ExpertLayout layout) {
  switch (layout) {
    case ExpertLayout::PerExpert: return "per-expert (experts.{e}.*_proj)";
    case ExpertLayout::Stacked: return "stacked (experts.gate_up_proj, experts.down_proj)";
    case ExpertLayout::SwitchMlp: return "switch_mlp (switch_mlp.*_proj)";
    case ExpertLayout::SwitchGlu: return "switch_glu (experts.switch_glu.*_proj)";
  }
  return "?";
}

ExpertLayout detect_expert_layout(const TensorStore& store, const std::string& dir, const std::string& mlp) {
  const bool per_expert = module_stored(store, mlp + ".experts.0.gate_proj");
  const bool stacked = store.find(mlp + ".experts.gate_up_proj") != nullptr;
  const bool switch_mlp = store.find(mlp + ".switch_mlp.gate_proj.weight") != nullptr;
  const bool switch_glu = store.find(mlp + ".experts.switch_glu.gate_proj.weight") != nullptr;
  const int count = int(per_expert) + int(stacked) + int(switch_mlp) + int(switch_glu);
  if (count == 0)
    fail("{}: missing tensors of '{}''s experts: none of '{}.experts.0.gate_proj.weight' (per expert), "
         "'{}.experts.gate_up_proj' (stacked), '{}.switch_mlp.gate_proj.weight' or "
         "'{}.experts.switch_glu.gate_proj.weight' (mlx) is stored",
         dir, mlp, mlp, mlp, mlp, mlp);
  if (count > 1)
    fail("{}: '{}' stores its experts in more than one layout (per expert: {}, stacked: {}, switch_mlp: {}, "
         "switch_glu: {})",
         dir, mlp, per_expert, stacked, switch_mlp, switch_glu);
  return per_expert ? ExpertLayout::PerExpert
         : stacked  ? ExpertLayout::Stacked
         : switch_mlp ? ExpertLayout::SwitchMlp
                      : ExpertLayout::SwitchGlu;
}

ExpertMatrices expert_matrices(const TensorStore& store, const QuantConfig& quant, const std::string& dir,
                               const std::string& mlp, ExpertLayout layout, int expert, int64_t num_experts,
                               int64_t I, int64_t H, MatrixForm form) {
  if (expert < 0 || expert >= num_experts) fail("internal: expert {} outside [0, {})", expert, num_experts);
  const int64_t E = num_experts;
  switch (layout) {
    case ExpertLayout::PerExpert: {
      const std::string p = fmt::format("{}.experts.{}.", mlp, expert);
      return {checkpoint_matrix(store, quant, dir, p + "gate_proj", I, H, form),
              checkpoint_matrix(store, quant, dir, p + "up_proj", I, H, form),
              checkpoint_matrix(store, quant, dir, p + "down_proj", H, I, form)};
    }
    case ExpertLayout::Stacked: {
      const std::string gate_up = mlp + ".experts.gate_up_proj", down = mlp + ".experts.down_proj";
      return {stacked_slice(store, quant, dir, gate_up, false, expert, E, 2 * I, 0, I, H),
              stacked_slice(store, quant, dir, gate_up, false, expert, E, 2 * I, I, I, H),
              stacked_slice(store, quant, dir, down, false, expert, E, H, 0, H, I)};
    }
    case ExpertLayout::SwitchMlp:
    case ExpertLayout::SwitchGlu: {
      const std::string p = mlp + (layout == ExpertLayout::SwitchMlp ? ".switch_mlp." : ".experts.switch_glu.");
      return {stacked_slice(store, quant, dir, p + "gate_proj", true, expert, E, I, 0, I, H),
              stacked_slice(store, quant, dir, p + "up_proj", true, expert, E, I, 0, I, H),
              stacked_slice(store, quant, dir, p + "down_proj", true, expert, E, H, 0, H, I)};
    }
  }
  fail("internal: unknown expert layout");
}

ExpertLayout expert_layout(const Qwen35Checkpoint& ck, const std::string& layer) {
  return detect_expert_layout(ck.store(), ck.dir(), ck.stored_name(layer + ".mlp"));
}

ExpertMatrices expert_matrices(const Qwen35Checkpoint& ck, const std::string& layer, ExpertLayout layout, int expert,
                               MatrixForm form) {
  const Qwen35Config& c = ck.config();
  return expert_matrices(ck.store(), c.quant, ck.dir(), ck.stored_name(layer + ".mlp"), layout, expert,
                         c.num_experts, c.moe_intermediate_size, c.hidden_size, form);
}

void validate_moe_mlp(const Qwen35Checkpoint& ck, const std::string& layer) {
  const Qwen35Config& c = ck.config();
  const int64_t H = c.hidden_size, Is = c.shared_expert_intermediate_size;
  const std::string p = layer + ".mlp";
  ck.matrix(p + ".gate", c.num_experts, H, MatrixForm::Checked);
  const ExpertLayout layout = expert_layout(ck, layer);
  for (int e = 0; e < c.num_experts; ++e) expert_matrices(ck, layer, layout, e, MatrixForm::Checked);
  ck.matrix(p + ".shared_expert.gate_proj", Is, H, MatrixForm::Checked);
  ck.matrix(p + ".shared_expert.up_proj", Is, H, MatrixForm::Checked);
  ck.matrix(p + ".shared_expert.down_proj", H, Is, MatrixForm::Checked);
  ck.matrix(p + ".shared_expert_gate", 1, H, MatrixForm::Checked);
}

}  // namespace nextn
