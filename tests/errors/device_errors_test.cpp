// Must-fail cases of device indices: an index outside what a Device can hold
// (0..127, stored in 8 bits) raises kiln::Error wherever it is given, instead
// of wrapping to another device (cuda:300 used to become cuda:44).

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Device;
using kiln::DeviceType;

TEST(DeviceErrors, IndexOutOfRange) {
  EXPECT_KILN_ERROR(Device::cuda(300), "[device] expected a device index 0..127, got 300");
  EXPECT_KILN_ERROR(Device::cuda(128), "[device] expected a device index 0..127, got 128");
  EXPECT_KILN_ERROR(Device::cuda(256), "got 256");  // would wrap to cuda:0
  EXPECT_KILN_ERROR(Device::cuda(-1), "got -1");
  EXPECT_KILN_ERROR(Device(DeviceType::CPU, 1000), "got 1000");
  EXPECT_KILN_ERROR(Device("cuda:300"), "[device] expected a device index 0..127 after ':'");
  EXPECT_KILN_ERROR(Device("cuda:-1"), "[device] expected a device index 0..127 after ':'");
  EXPECT_KILN_ERROR(kiln::ones({2}).to(Device::cuda(300)), "got 300");
  EXPECT_KILN_ERROR(kiln::call_op("empty", {std::vector<int64_t>{2}}, {{"device", "cuda:300"}}),
                    "after ':', got 'cuda:300'");
}

TEST(DeviceErrors, IndicesInRangeRoundTrip) {
  for (int i : {0, 1, 7, 44, 127}) {
    EXPECT_EQ(Device::cuda(i).index(), i);
    EXPECT_EQ(Device("cuda:" + std::to_string(i)), Device::cuda(i));
    EXPECT_EQ(Device::cuda(i).str(), "cuda:" + std::to_string(i));
  }
  static_assert(Device::cuda(3).index() == 3, "a valid Device stays a constant expression");
}

}  // namespace
