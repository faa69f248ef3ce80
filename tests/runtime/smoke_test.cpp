#include <gtest/gtest.h>

#include "kiln/kiln.h"

TEST(Smoke, FullAndCopy) {
  kiln::Tensor a = kiln::full({2, 3}, 1.5);
  EXPECT_EQ(a.dtype(), kiln::kFloat32);
  EXPECT_EQ(a.numel(), 6);
  kiln::Tensor b = a.to(kiln::kFloat64);
  EXPECT_EQ(b.dtype(), kiln::kFloat64);
  EXPECT_EQ(b.view({6})[4].item<double>(), 1.5);
}
