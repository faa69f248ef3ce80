#include "runtime/core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/support/testing.h"

namespace kiln {
namespace {

using kiln::testing::EnvScope;

TEST(EnvFlag, ParsesEverySpelling) {
  for (const char* on :
       {"1", "true", "TRUE", "True", "on", "ON", "yes", "Yes", " 1 ", "\ttrue\n"}) {
    EXPECT_EQ(parse_env_flag(on), std::optional<bool>(true)) << "'" << on << "'";
  }
  for (const char* off : {"0", "false", "FALSE", "off", "Off", "no", "NO", "  0", "false  "}) {
    EXPECT_EQ(parse_env_flag(off), std::optional<bool>(false)) << "'" << off << "'";
  }
  for (const char* bad : {"", " ", "2", "-1", "enable", "truee", "o", "y", "1 0", "01"}) {
    EXPECT_EQ(parse_env_flag(bad), std::nullopt) << "'" << bad << "'";
  }
}

// KILN_EAGER=false used to turn eager mode on: anything but "0" was on.
TEST(EnvFlag, FalseIsOffAndOffIsOff) {
  {
    EnvScope e("KILN_TEST_FLAG_A", "false");
    EXPECT_FALSE(env_flag("KILN_TEST_FLAG_A", false));
    EXPECT_FALSE(env_flag("KILN_TEST_FLAG_A", true));
  }
  {
    EnvScope e("KILN_TEST_FLAG_A", "Off");
    EXPECT_FALSE(env_flag("KILN_TEST_FLAG_A", true));
  }
  {
    EnvScope e("KILN_TEST_FLAG_A", " yes ");
    EXPECT_TRUE(env_flag("KILN_TEST_FLAG_A", false));
  }
  unsetenv("KILN_TEST_FLAG_UNSET");
  EXPECT_TRUE(env_flag("KILN_TEST_FLAG_UNSET", true));
  EXPECT_FALSE(env_flag("KILN_TEST_FLAG_UNSET", false));
  EnvScope empty("KILN_TEST_FLAG_EMPTY", "");
  EXPECT_TRUE(env_flag("KILN_TEST_FLAG_EMPTY", true));
}

TEST(EnvFlag, AnUnknownValueWarnsOnceAndKeepsTheDefault) {
  EnvScope e("KILN_TEST_FLAG_B", "maybe");
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(env_flag("KILN_TEST_FLAG_B", true));
  EXPECT_TRUE(env_flag("KILN_TEST_FLAG_B", true));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("KILN_TEST_FLAG_B='maybe'"), std::string::npos) << err;
  EXPECT_NE(err.find("true/false"), std::string::npos) << err;
  EXPECT_EQ(err.find("KILN_TEST_FLAG_B", err.find("KILN_TEST_FLAG_B") + 1), std::string::npos)
      << "warned twice: " << err;
  EXPECT_FALSE(env_flag("KILN_TEST_FLAG_B", false));  // the default, whichever it is
}

TEST(EnvInt, WholeIntegersInRangeOnly) {
  {
    EnvScope e("KILN_TEST_INT_A", " 12 ");
    EXPECT_EQ(env_int("KILN_TEST_INT_A", 0, 15), std::optional<int64_t>(12));
  }
  unsetenv("KILN_TEST_INT_UNSET");
  EXPECT_EQ(env_int("KILN_TEST_INT_UNSET", 0, 15), std::nullopt);
  for (const char* bad : {"12abc", "abc", "16", "-2", "1e3", "99999999999999999999"}) {
    EnvScope e("KILN_TEST_INT_B", bad);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(env_int("KILN_TEST_INT_B", -1, 15), std::nullopt) << bad;
    (void)::testing::internal::GetCapturedStderr();
  }
  EnvScope e("KILN_TEST_INT_C", "7x");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(env_int("KILN_TEST_INT_C", 0, 15), std::nullopt);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("KILN_TEST_INT_C='7x'"), std::string::npos) << err;
  EXPECT_NE(err.find("an integer from 0 to 15"), std::string::npos) << err;
}

TEST(EnvString, TrimsAndTreatsEmptyAsUnset) {
  {
    EnvScope e("KILN_TEST_STR", "  rows ");
    EXPECT_EQ(env_string("KILN_TEST_STR"), std::optional<std::string>("rows"));
  }
  EnvScope e("KILN_TEST_STR", "   ");
  EXPECT_EQ(env_string("KILN_TEST_STR"), std::nullopt);
}

}  // namespace
}  // namespace kiln
