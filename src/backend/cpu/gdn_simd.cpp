// Highway kernel of gdn_simd.h: the value dimension in vectors, the key
// dimension as the inner loop so that each vector of mem and o stays in a
// register for a whole sweep (the state is read twice per token, as before).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/gdn_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef NEXTN_CPU_GDN_SIMD_ONCE
#define NEXTN_CPU_GDN_SIMD_ONCE
#include "backend/cpu/gdn_simd.h"
#endif

HWY_BEFORE_NAMESPACE();
namespace nextn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void GdnHeadStep(float* S, int dk, int dv, const float* q, const float* k, const float* v, float decay, float beta,
                 float* mem, float* o) {
  const hn::ScalableTag<float> d;
  const int N = int(hn::Lanes(d));
  const auto vdecay = hn::Set(d, decay), vbeta = hn::Set(d, beta);
  int j = 0;
  for (; j + N <= dv; j += N) {
    auto m = hn::Zero(d);
    for (int i = 0; i < dk; ++i) {
      float* Sij = S + size_t(i) * size_t(dv) + j;
      const auto s = hn::Mul(hn::LoadU(d, Sij), vdecay);
      hn::StoreU(s, d, Sij);
      m = hn::Add(m, hn::Mul(s, hn::Set(d, k[i])));
    }
    m = hn::Mul(hn::Sub(hn::LoadU(d, v + j), m), vbeta);
    auto acc = hn::Zero(d);
    for (int i = 0; i < dk; ++i) {
      float* Sij = S + size_t(i) * size_t(dv) + j;
      const auto s = hn::Add(hn::LoadU(d, Sij), hn::Mul(hn::Set(d, k[i]), m));
      hn::StoreU(s, d, Sij);
      acc = hn::Add(acc, hn::Mul(s, hn::Set(d, q[i])));
    }
    hn::StoreU(m, d, mem + j);
    hn::StoreU(acc, d, o + j);
  }
  for (; j < dv; ++j) {  // columns past the last full vector, in scalar code
    float m = 0.0f;
    for (int i = 0; i < dk; ++i) {
      float& s = S[size_t(i) * size_t(dv) + j];
      s *= decay;
      m += s * k[i];
    }
    m = (v[j] - m) * beta;
    float acc = 0.0f;
    for (int i = 0; i < dk; ++i) {
      float& s = S[size_t(i) * size_t(dv) + j];
      s += k[i] * m;
      acc += s * q[i];
    }
    mem[j] = m;
    o[j] = acc;
  }
}

}  // namespace nextn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nextn::cpu {

HWY_EXPORT(GdnHeadStep);

void gdn_head_step(float* S, int dk, int dv, const float* q, const float* k, const float* v, float decay, float beta,
                   float* mem, float* o) {
  HWY_DYNAMIC_DISPATCH(GdnHeadStep)(S, dk, dv, q, k, v, decay, beta, mem, o);
}

}  // namespace nextn::cpu
#endif  // HWY_ONCE
