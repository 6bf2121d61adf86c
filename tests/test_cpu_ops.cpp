// cpu::argmax, the reference every argmax path is compared with: greater
// value, then lower index; NaN never wins; an all-NaN row gives 0.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"

namespace nextn {
namespace {

int32_t am(const std::vector<float>& v) { return cpu::argmax(v.data(), int64_t(v.size())); }

TEST(CpuOps, ArgmaxTotalOrder) {
  const float nan = std::nanf("");
  EXPECT_EQ(am({1.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(am({3.0f, 1.0f, 3.0f}), 0);          // ties: lower index
  EXPECT_EQ(am({nan, 1.0f, 2.0f}), 2);           // NaN at 0 does not win
  EXPECT_EQ(am({1.0f, nan, 0.5f}), 0);
  EXPECT_EQ(am({-INFINITY, -INFINITY}), 0);
  EXPECT_EQ(am({nan, nan}), 0);
  EXPECT_EQ(am({nan, -INFINITY, nan}), 1);
}

}  // namespace
}  // namespace nextn
