// KILN_LOG_FILE / set_log_file: log lines go to the end of a file, each
// flushed as written, and back to stderr.

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LogFile, LinesGoToTheFileAndBackToStderr) {
  const std::string path = kiln::testing::temp_path("log_file_test.log");
  std::remove(path.c_str());
  kiln::set_log_file(path);
  EXPECT_EQ(kiln::log_file(), path);
  kiln::set_logs("recompiles,dispatch");
  {
    auto f = kiln::jit::compile([](const kiln::Tensor& x) { return x * 2.0; }, {.name = "logged"});
    (void)f(kiln::full({2}, 1.0f));
  }
  kiln::set_logs("");
  // Read while the file is still the sink: every line is flushed as written.
  const std::string text = read_file(path);
  EXPECT_NE(text.find("[kiln recompiles] logged: entry 1/8: first call"), std::string::npos)
      << text;
  EXPECT_NE(text.find("[kiln dispatch] "), std::string::npos) << text;
  kiln::set_log_file("");
  EXPECT_EQ(kiln::log_file(), "");
  ::testing::internal::CaptureStderr();
  kiln::set_logs("recompiles");
  kiln::detail::log_line(kiln::LogChannel::Recompiles, "to stderr again");
  kiln::set_logs("");
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("[kiln recompiles] to stderr again"),
            std::string::npos);
  EXPECT_EQ(read_file(path).find("to stderr again"), std::string::npos);
  EXPECT_KILN_ERROR(kiln::set_log_file("/nonexistent-dir/x.log"),
                    "expected a path open for appending");
  std::remove(path.c_str());
}

// Spaces around a channel's name are dropped, as around every KILN_* value:
// "recompiles, guards" was refused (set_logs) or lost its second channel
// (KILN_LOGS, with a warning about ' guards').
TEST(LogChannels, SpacesAroundNamesAreDropped) {
  kiln::set_logs(" recompiles, guards\t,perf ");
  EXPECT_TRUE(kiln::log_enabled(kiln::LogChannel::Recompiles));
  EXPECT_TRUE(kiln::log_enabled(kiln::LogChannel::Guards));
  EXPECT_TRUE(kiln::log_enabled(kiln::LogChannel::Perf));
  EXPECT_FALSE(kiln::log_enabled(kiln::LogChannel::Fusion));
  kiln::set_logs("");
  EXPECT_FALSE(kiln::log_enabled(kiln::LogChannel::Guards));
  EXPECT_KILN_ERROR(kiln::set_logs("recompiles, gaurds"),
                    "[set_logs] expected channels among recompiles, guards, fusion, output_code, "
                    "graphs, dispatch, alloc, perf or all, got 'gaurds'");
  kiln::set_logs("");
}

}  // namespace
