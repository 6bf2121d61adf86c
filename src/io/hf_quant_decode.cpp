// Checking and dequantizing one module stored in a transformers quantized
// format (hf_quant.h; layouts in docs/formats.md). Each value is the format's
// formula in fp32 from the stored operands: the integer difference q - zero is
// exact in fp32, so every element is rounded once, at the multiply by its
// scale, which is what the reference libraries compute when handed fp32 scales.
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/hf_quant.h"

namespace nextn {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The module's tensors, every check naming the checkpoint and the tensor.
struct Module {
  const TensorStore& store;
  const std::string& dir;
  const std::string& mod;
  std::string what;  // "gptq", for messages

  const TensorView& need(const std::string& suffix) const {
    const TensorView* t = store.find(mod + suffix);
    if (!t) fail("{}: missing tensor '{}{}' ({} module '{}')", dir, mod, suffix, what, mod);
    return *t;
  }
  [[noreturn]] void bad(const TensorView& t, const std::string& why) const {
    fail("{}: tensor '{}': {}", dir, t.name, why);
  }
  void dtype(const TensorView& t, std::initializer_list<DType> ok, const char* expected) const {
    for (DType d : ok)
      if (t.dtype == d) return;
    bad(t, fmt::format("dtype {}, expected {} ({})", dtype_name(t.dtype), expected, what));
  }
  void shape(const TensorView& t, const std::vector<int64_t>& want, const std::string& why) const {
    if (t.shape != want) bad(t, fmt::format("shape {}, expected {} ({})", shape_str(t.shape), shape_str(want), why));
  }
  void float_dtype(const TensorView& t) const { dtype(t, {DType::F32, DType::F16, DType::BF16}, "F32, F16 or BF16"); }
  // The group size must tile the input exactly (a partial group has no
  // agreed meaning across these formats).
  int64_t groups(int64_t cols, int64_t g) const {
    if (g < 1 || cols % g != 0)
      fail("{}: {} module '{}': group size {} does not divide its {} input columns", dir, what, mod, g, cols);
    return cols / g;
  }
};

uint32_t word_at(const TensorView& t, size_t i) { return load_unaligned<uint32_t>(t.data + 4 * i); }

float fp8_at(const Module& m, const TensorView& t, size_t i) {
  const float v = fp8_e4m3_to_f32(t.data[i]);
  if (std::isnan(v)) m.bad(t, fmt::format("element {} is a NaN code", i));
  return v;
}

// The native codec hands the codes over unread: refuse NaN codes up front,
// as the dequantizing path does element by element.
void check_fp8_codes(const Module& m, const TensorView& t) {
  for (size_t i = 0; i < t.nbytes; ++i)
    if ((t.data[i] & 0x7f) == 0x7f) m.bad(t, fmt::format("element {} is a NaN code", i));
}

std::shared_ptr<DecodedMatrix> make(int64_t rows, int64_t cols) {
  auto d = std::make_shared<DecodedMatrix>();
  d->values.resize(size_t(rows) * size_t(cols));
  return d;
}

// ---- native codecs (MatrixForm::Native) ----
// The group a native codec stores for a format's scale that is constant over
// `g` consecutive columns: g itself when 32 or 64, 128 when g is a multiple of
// 128 (the kernels' unit of k), else 0 (no native codec: dequantized).
int64_t native_group(int64_t g) { return g == 32 || g == 64 ? g : g % 128 == 0 ? 128 : 0; }

// Integer codes with a scale and zero per (row, group of `src_group` columns):
// w = scale * (q - zero). 4-bit: ZeroInt (the zeros kept, as floats). 8-bit:
// Affine with bias = -scale * zero when that product is exact in fp32 for
// every group (then scale * q + bias is the same value), else nullptr.
// q(r, c), scale(r, c), zero(r, c) read the stored tensors.
template <typename Q, typename S, typename Z>
std::shared_ptr<DecodedMatrix> native_int(int64_t rows, int64_t cols, int bits, int64_t src_group, Q&& q, S&& scale,
                                          Z&& zero) {
  const int64_t g = native_group(src_group);
  if (g == 0 || cols % 128 != 0) return nullptr;
  const int64_t ng = cols / g;
  auto d = std::make_shared<DecodedMatrix>();
  d->bits = bits;
  d->group = int(g);
  d->scales.resize(size_t(rows * ng));
  d->biases.resize(size_t(rows * ng));
  const bool zero_int = bits == 4;
  std::atomic<bool> exact = true;
  // Rows are independent: a 27B's matrices are repacked on every core.
  ThreadPool pool(default_thread_count());
  pool.parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    bool ex = true;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < ng; ++j) {
        const float s = scale(r, j * g);
        const int32_t z = zero(r, j * g);
        const double b = -double(s) * double(z);
        d->scales[size_t(r * ng + j)] = s;
        d->biases[size_t(r * ng + j)] = zero_int ? float(z) : float(b);
        ex = ex && double(float(b)) == b;
      }
    if (!ex) exact = false;
  });
  if (!zero_int && !exact) return nullptr;
  d->codec = zero_int ? WeightCodec::ZeroInt : WeightCodec::Affine;
  const int per = 32 / bits;
  d->codes.assign(size_t(rows * (cols / per)), 0u);
  pool.parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c)
        d->codes[size_t(r * (cols / per) + c / per)] |= uint32_t(q(r, c)) << (bits * (c % per));
  });
  return d;
}

// An integer format handed over in `form` (not Checked) from its element
// readers (native_int's): the native codec when `native_ok` and one fits,
// else dequantized, w = scale * (q - zero) per element, rounded once.
template <typename Q, typename S, typename Z>
std::shared_ptr<DecodedMatrix> hand_over_int(MatrixForm form, bool native_ok, int64_t rows, int64_t cols, int bits,
                                             int64_t src_group, Q&& q, S&& scale, Z&& zero, const std::string& label) {
  std::shared_ptr<DecodedMatrix> d;
  if (form == MatrixForm::Native && native_ok) d = native_int(rows, cols, bits, src_group, q, scale, zero);
  if (!d) {
    d = make(rows, cols);
    ThreadPool pool(default_thread_count());
    pool.parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < cols; ++c)
          d->values[size_t(r * cols + c)] = scale(r, c) * float(int32_t(q(r, c)) - zero(r, c));
    });
  }
  d->label = label;
  return d;
}

// FP8 codes with one scale per (row, group of `src_group` columns): the stored
// weight is the codec's (no copy); the scales are expanded to [rows, cols/g].
template <typename S>
std::shared_ptr<DecodedMatrix> native_fp8(const TensorView& w, int64_t rows, int64_t cols, int64_t src_group, S&& scale) {
  const int64_t g = native_group(src_group);
  if (g == 0 || cols % 128 != 0) return nullptr;
  auto d = std::make_shared<DecodedMatrix>();
  d->codec = WeightCodec::Fp8;
  d->bits = 8;
  d->group = int(g);
  d->view = w;
  const int64_t ng = cols / g;
  d->scales.resize(size_t(rows * ng));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < ng; ++j) d->scales[size_t(r * ng + j)] = scale(r, j * g);
  return d;
}

// An FP8 weight handed over in `form` (not Checked): the native codec where
// one fits, else dequantized, w = fp8 * scale per element (NaN codes refused).
template <typename S>
std::shared_ptr<DecodedMatrix> hand_over_fp8(const Module& m, const TensorView& w, MatrixForm form, int64_t rows,
                                             int64_t cols, int64_t src_group, S&& scale, const std::string& label) {
  std::shared_ptr<DecodedMatrix> d;
  if (form == MatrixForm::Native) {
    check_fp8_codes(m, w);
    d = native_fp8(w, rows, cols, src_group, scale);
  }
  if (!d) {
    d = make(rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) d->values[size_t(r * cols + c)] = fp8_at(m, w, size_t(r * cols + c)) * scale(r, c);
  }
  d->label = label;
  return d;
}

// Points a native matrix's views at its vectors.
void finish_native(DecodedMatrix& d, const std::string& name, int64_t rows, int64_t cols) {
  const int64_t ng = cols / d.group;
  if (d.codec != WeightCodec::Fp8) {
    d.view.dtype = DType::U32;
    d.view.shape = {rows, cols * d.bits / 32};
    d.view.data = reinterpret_cast<const uint8_t*>(d.codes.data());
    d.view.nbytes = d.codes.size() * 4;
  }
  d.view.name = name + ".weight";
  auto vec_view = [&](TensorView& v, const std::vector<float>& f, const char* suffix) {
    v.name = name + suffix;
    v.dtype = DType::F32;
    v.shape = {rows, ng};
    v.data = reinterpret_cast<const uint8_t*>(f.data());
    v.nbytes = f.size() * 4;
  };
  vec_view(d.scales_view, d.scales, ".scales");
  if (!d.biases.empty()) vec_view(d.biases_view, d.biases, ".biases");
}

// fp8: weight F8_E4M3 [out, in], weight_scale_inv [ceil(out/bo), ceil(in/bi)];
// w = fp8 * scale_inv of the element's block (transformers' finegrained_fp8).
std::shared_ptr<DecodedMatrix> fp8(const Module& m, const HfQuant& q, int64_t rows, int64_t cols, MatrixForm form) {
  const TensorView& w = m.need(".weight");
  const TensorView& s = m.need(".weight_scale_inv");
  if (q.not_converted(m.mod))
    m.bad(s, "stored, but quantization_config.modules_to_not_convert names the module (transformers would load "
             "it unquantized)");
  m.dtype(w, {DType::F8_E4M3}, "F8_E4M3");
  m.shape(w, {rows, cols}, "the module's [out, in]");
  m.float_dtype(s);
  const int64_t bo = q.block_out ? q.block_out : rows, bi = q.block_in ? q.block_in : cols;  // 0: per tensor
  if (q.block_out || s.numel() != 1)
    m.shape(s, {ceil_div(rows, bo), ceil_div(cols, bi)},
            fmt::format("one scale per {}x{} block of [{}, {}]", bo, bi, rows, cols));
  if (form == MatrixForm::Checked) return nullptr;
  const int64_t sc = ceil_div(cols, bi);
  const std::string label = q.block_out ? fmt::format("fp8 b{}x{}", bo, bi) : std::string("fp8 per-tensor");
  auto scale = [&](int64_t r, int64_t c) { return load_float(s.dtype, s.data, size_t((r / bo) * sc + c / bi)); };
  return hand_over_fp8(m, w, form, rows, cols, bi, scale, label);
}

// gptq (v1): qweight [in*bits/32, out] packs along the input, first element
// in the low bits; qzeros [groups, out*bits/32] packs along the output and
// stores zero - 1; scales [groups, out]; g_idx [in] the group of each input.
std::shared_ptr<DecodedMatrix> gptq(const Module& m, const HfQuant& q, int64_t rows, int64_t cols, MatrixForm form) {
  const int bits = q.bits, per = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  const TensorView& qw = m.need(".qweight");
  const TensorView& qz = m.need(".qzeros");
  const TensorView& sc = m.need(".scales");
  const TensorView* gi = m.store.find(m.mod + ".g_idx");
  const int64_t g = q.group_size == -1 ? cols : q.group_size;
  const int64_t ng = m.groups(cols, g);
  if (cols % per != 0 || rows % per != 0)
    m.bad(qw, fmt::format("[out, in] = [{}, {}] cannot be packed {} per int32 ({}-bit)", rows, cols, per, bits));
  m.dtype(qw, {DType::I32, DType::U32}, "I32");
  m.shape(qw, {cols / per, rows}, fmt::format("{}-bit packing of [in, out] = [{}, {}]", bits, cols, rows));
  m.dtype(qz, {DType::I32, DType::U32}, "I32");
  m.shape(qz, {ng, rows / per}, fmt::format("{} groups x {}-bit packed out {}", ng, bits, rows));
  m.float_dtype(sc);
  m.shape(sc, {ng, rows}, fmt::format("{} groups of {} x out {}", ng, g, rows));
  std::vector<int64_t> group(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) group[size_t(i)] = i / g;
  bool ordered = true;  // g_idx absent or i / g everywhere
  if (gi) {
    m.dtype(*gi, {DType::I32, DType::I64}, "I32");
    m.shape(*gi, {cols}, "one group index per input column");
    for (int64_t i = 0; i < cols; ++i) {
      const int64_t v = gi->dtype == DType::I32 ? load_unaligned<int32_t>(gi->data + 4 * i)
                                                : load_unaligned<int64_t>(gi->data + 8 * i);
      if (v < 0 || v >= ng) m.bad(*gi, fmt::format("element {} is {}, outside [0, {})", i, v, ng));
      ordered = ordered && v == i / g;
      group[size_t(i)] = v;
    }
  }
  if (form == MatrixForm::Checked) return nullptr;
  auto qv = [&](int64_t o, int64_t i) { return (word_at(qw, size_t((i / per) * rows + o)) >> ((i % per) * bits)) & mask; };
  auto scale = [&](int64_t o, int64_t i) { return load_float(sc.dtype, sc.data, size_t(group[size_t(i)] * rows + o)); };
  auto zero = [&](int64_t o, int64_t i) {  // stored minus one
    return int32_t((word_at(qz, size_t(group[size_t(i)] * (rows / per) + o / per)) >> ((o % per) * bits)) & mask) + 1;
  };
  return hand_over_int(form, ordered, rows, cols, bits, g, qv, scale, zero, fmt::format("gptq q{} g{}", bits, g));
}

// awq gemm: qweight [in, out/8] and qzeros [groups, out/8] pack along the
// output, column j of each 8 in nibble kAwqNibble[j] (AutoAWQ's order
// 0,2,4,6,1,3,5,7); scales [groups, out]; w = scale * (q - zero).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

std::shared_ptr<DecodedMatrix> awq(const Module& m, const HfQuant& q, int64_t rows, int64_t cols, MatrixForm form) {
  const TensorView& qw = m.need(".qweight");
  const TensorView& qz = m.need(".qzeros");
  const TensorView& sc = m.need(".scales");
  const int64_t g = q.group_size, ng = m.groups(cols, g);
  if (rows % 8 != 0) m.bad(qw, fmt::format("{} output rows cannot be packed 8 per int32", rows));
  m.dtype(qw, {DType::I32, DType::U32}, "I32");
  m.shape(qw, {cols, rows / 8}, fmt::format("[in, out/8] for [out, in] = [{}, {}]", rows, cols));
  m.dtype(qz, {DType::I32, DType::U32}, "I32");
  m.shape(qz, {ng, rows / 8}, fmt::format("{} groups x out/8", ng));
  m.float_dtype(sc);
  m.shape(sc, {ng, rows}, fmt::format("{} groups of {} x out {}", ng, g, rows));
  if (form == MatrixForm::Checked) return nullptr;
  auto qv = [&](int64_t o, int64_t i) { return (word_at(qw, size_t(i * (rows / 8) + o / 8)) >> (4 * kAwqNibble[o % 8])) & 15u; };
  auto scale = [&](int64_t o, int64_t i) { return load_float(sc.dtype, sc.data, size_t((i / g) * rows + o)); };
  auto zero = [&](int64_t o, int64_t i) {
    return int32_t((word_at(qz, size_t((i / g) * (rows / 8) + o / 8)) >> (4 * kAwqNibble[o % 8])) & 15u);
  };
  return hand_over_int(form, true, rows, cols, 4, g, qv, scale, zero, fmt::format("awq q4 g{}", g));
}

// compressed-tensors scale shape per strategy: [1] (tensor), [out, 1]
// (channel), [out, in/g] (group), [ceil(out/bo), ceil(in/bi)] (block); the
// scale of element (r, c) is at (r / ro, c / co) of that grid.
struct Grid {
  int64_t ro, co, gr, gc;  // rows / cols per scale; grid shape
};

Grid ct_grid(const Module& m, const CtScheme& s, int64_t rows, int64_t cols) {
  if (s.strategy == "tensor") return {rows, cols, 1, 1};
  if (s.strategy == "channel") return {1, cols, rows, 1};
  if (s.strategy == "group") return {1, s.group_size, rows, m.groups(cols, s.group_size)};
  return {s.block_out, s.block_in, ceil_div(rows, s.block_out), ceil_div(cols, s.block_in)};
}

void ct_scale_shape(const Module& m, const TensorView& sc, const CtScheme& s, const Grid& gd) {
  m.float_dtype(sc);
  const bool tensor_ok = s.strategy == "tensor" && sc.numel() == 1 && sc.shape.size() <= 1;
  if (!tensor_ok) m.shape(sc, {gd.gr, gd.gc}, fmt::format("strategy {} of scheme {}", s.strategy, s.name));
}

std::shared_ptr<DecodedMatrix> ct_int(const Module& m, const CtScheme& s, int64_t rows, int64_t cols, MatrixForm form) {
  const int bits = s.bits, per = 32 / bits, offset = 1 << (bits - 1);
  const uint32_t mask = (1u << bits) - 1u;
  const TensorView& wp = m.need(".weight_packed");
  const TensorView& sc = m.need(".weight_scale");
  if (s.strategy == "block" || (s.strategy == "tensor" && !s.symmetric))
    m.bad(wp, fmt::format("pack-quantized with strategy {}{} is not supported", s.strategy,
                          s.symmetric ? "" : " (asymmetric)"));
  const Grid gd = ct_grid(m, s, rows, cols);
  m.dtype(wp, {DType::I32, DType::U32}, "I32");
  m.shape(wp, {rows, ceil_div(cols, per)}, fmt::format("{}-bit packing of [out, in] = [{}, {}]", bits, rows, cols));
  if (const TensorView* ws = m.store.find(m.mod + ".weight_shape")) {
    m.dtype(*ws, {DType::I64, DType::I32}, "I64");
    const bool i64 = ws->dtype == DType::I64;
    auto at = [&](size_t k) { return i64 ? load_unaligned<int64_t>(ws->data + 8 * k) : load_unaligned<int32_t>(ws->data + 4 * k); };
    if (ws->numel() != 2 || at(0) != rows || at(1) != cols)
      m.bad(*ws, fmt::format("does not hold [{}, {}], the module's [out, in]", rows, cols));
  }
  if (const TensorView* gi = m.store.find(m.mod + ".weight_g_idx"))
    m.bad(*gi, "activation-ordered groups (weight_g_idx) are not supported");
  ct_scale_shape(m, sc, s, gd);
  const TensorView* zp = nullptr;
  if (!s.symmetric) {
    // Asymmetric zero points are packed like the weight, but along the output
    // (dim 0): [ceil(out/per), groups].
    zp = &m.need(".weight_zero_point");
    m.dtype(*zp, {DType::I32, DType::U32}, "I32");
    m.shape(*zp, {ceil_div(rows, per), gd.gc}, fmt::format("{}-bit zero points packed along out {}", bits, rows));
  }
  if (form == MatrixForm::Checked) return nullptr;
  const size_t wpr = size_t(ceil_div(cols, per));
  // Stored codes and zeros are q + offset: w = scale * (q_stored - zero_stored), zero_stored = offset when symmetric.
  auto qv = [&](int64_t r, int64_t c) { return (word_at(wp, size_t(r) * wpr + size_t(c / per)) >> ((c % per) * bits)) & mask; };
  auto scale = [&](int64_t r, int64_t c) { return load_float(sc.dtype, sc.data, size_t((r / gd.ro) * gd.gc + c / gd.co)); };
  auto zero = [&](int64_t r, int64_t c) {
    if (!zp) return offset;
    return int32_t((word_at(*zp, size_t((r / per) * gd.gc + c / gd.co)) >> ((r % per) * bits)) & mask);
  };
  return hand_over_int(form, true, rows, cols, bits, gd.co, qv, scale, zero,
                       fmt::format("ct int{} {}", bits, s.strategy == "group" ? fmt::format("g{}", s.group_size) : s.strategy));
}

std::shared_ptr<DecodedMatrix> ct_float(const Module& m, const CtScheme& s, int64_t rows, int64_t cols, MatrixForm form) {
  const TensorView& w = m.need(".weight");
  const TensorView& sc = m.need(".weight_scale");
  m.dtype(w, {DType::F8_E4M3}, "F8_E4M3");
  m.shape(w, {rows, cols}, "the module's [out, in]");
  const Grid gd = ct_grid(m, s, rows, cols);
  ct_scale_shape(m, sc, s, gd);
  if (form == MatrixForm::Checked) return nullptr;
  const std::string label = fmt::format("ct fp8 {}", s.strategy == "group" ? fmt::format("g{}", s.group_size) : s.strategy);
  auto scale = [&](int64_t r, int64_t c) { return load_float(sc.dtype, sc.data, size_t((r / gd.ro) * gd.gc + c / gd.co)); };
  return hand_over_fp8(m, w, form, rows, cols, gd.co, scale, label);
}

}  // namespace

bool hf_module_quantized(const TensorStore& store, const HfQuant& q, const std::string& mod) {
  switch (q.method) {
    case QuantMethod::Fp8: return store.find(mod + ".weight_scale_inv") != nullptr;
    case QuantMethod::Gptq:
    case QuantMethod::Awq: return store.find(mod + ".qweight") != nullptr;
    case QuantMethod::CompressedTensors: {
      if (store.find(mod + ".weight_packed")) return true;
      const TensorView* w = store.find(mod + ".weight");
      return w && w->dtype == DType::F8_E4M3 && store.find(mod + ".weight_scale");
    }
    default: return false;
  }
}

std::shared_ptr<const DecodedMatrix> hf_decode(const TensorStore& store, const HfQuant& q, const std::string& dir,
                                               const std::string& mod, int64_t rows, int64_t cols, bool linear,
                                               MatrixForm form) {
  const Module m{store, dir, mod, quant_method_name(q.method)};
  std::shared_ptr<DecodedMatrix> d;
  switch (q.method) {
    case QuantMethod::Fp8: d = fp8(m, q, rows, cols, form); break;
    case QuantMethod::Gptq: d = gptq(m, q, rows, cols, form); break;
    case QuantMethod::Awq: d = awq(m, q, rows, cols, form); break;
    case QuantMethod::CompressedTensors: {
      const CtScheme* s = q.scheme_for(mod, linear);
      if (!s)
        fail("{}: module '{}' is stored quantized but no quantization_config.config_groups entry targets it (or "
             "'ignore' lists it)",
             dir, mod);
      const bool packed = store.find(mod + ".weight_packed") != nullptr;
      if (packed != (s->format == "pack-quantized"))
        fail("{}: module '{}' is stored {} but its config group '{}' says format {}", dir, mod,
             packed ? "pack-quantized (weight_packed)" : "float-quantized (F8_E4M3 weight)", s->name, s->format);
      d = packed ? ct_int(m, *s, rows, cols, form) : ct_float(m, *s, rows, cols, form);
      break;
    }
    default: fail("{}: module '{}': no transformers quantization format to decode", dir, mod);
  }
  if (!d) return d;
  if (d->codec != WeightCodec::Dense) {
    finish_native(*d, mod, rows, cols);
    return d;
  }
  d->view.name = mod + ".weight";
  d->view.dtype = DType::F32;
  d->view.shape = {rows, cols};
  d->view.data = reinterpret_cast<const uint8_t*>(d->values.data());
  d->view.nbytes = d->values.size() * sizeof(float);
  return d;
}

}  // namespace nextn
