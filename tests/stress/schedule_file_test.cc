// Schedule files are input: a damaged or hostile one is a one-line usage error, read within
// bounds, never a huge allocation, an overflow or a raw echo (issue 37, defect 4), and a
// written file carries every switch its failure needs (issue 36: --unsafe-live-sends).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/schedule/explore.h"

namespace dtsim::schedule {
namespace {

// A header with `line` in place of the line starting with its key (or added), then steps.
std::string with_line(const std::string& key, const std::string& line, int steps = 1) {
  std::string text = std::string(kScheduleMagic) + "\n";
  bool put = false;
  for (const std::string& l :
       {std::string("ranks 4"), std::string("seed 3"), std::string("iteration 0"),
        std::string("calls 16"), std::string("max-numel 2048"), std::string("mutant none")}) {
    if (l.rfind(key + " ", 0) == 0) {
      text += line + "\n";
      put = true;
    } else {
      text += l + "\n";
    }
  }
  if (!put) text += line + "\n";
  text += "steps " + std::to_string(steps) + "\n";
  for (int i = 0; i < steps; ++i) text += "1 00000000000000ff\n";
  return text;
}

class ScheduleFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dtsim-schedule-test-XXXXXX";
    const int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  // The UsageError's text that reading `text` gives, or "" if it reads.
  std::string error_of(const std::string& text) {
    std::ofstream(path_, std::ios::binary) << text;
    try {
      read_schedule_file(path_);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
  std::string path_;
};

TEST_F(ScheduleFileTest, AWellFormedFileReads) {
  EXPECT_EQ(error_of(with_line("seed", "seed 3")), "");
}

TEST_F(ScheduleFileTest, NumbersOutOfTheFlagsRangesAreRefused) {
  const struct {
    std::string key, line, want;
  } cases[] = {
      {"calls", "calls 2147483647", "calls must be a whole number from 1 to 100000"},
      {"max-numel", "max-numel 100000000", "max-numel must be a whole number from 1 to"},
      {"calls", "calls -1", "calls must be a whole number"},
      {"max-numel", "max-numel -1", "max-numel must be a whole number"},
      {"iteration", "iteration 2147483647", "iteration must be a whole number from 0 to"},
      {"ranks", "ranks 4096", "ranks must be a whole number from 1 to 256"},
      {"seed", "seed 99999999999999999999999", "seed must be a whole number"},
      {"seed", "seed 1x", "seed must be a whole number"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(with_line(c.key, c.line));
    EXPECT_NE(e.find(c.want), std::string::npos) << c.line << " -> " << e;
  }
}

TEST_F(ScheduleFileTest, ANonHexHashIsAUsageError) {
  std::string text = with_line("seed", "seed 3", 0);
  text.replace(text.find("steps 0"), 7, "steps 1");
  text += "1 zzzz\n";
  EXPECT_NE(error_of(text).find("step 0 is missing or is not"), std::string::npos)
      << error_of(text);
}

TEST_F(ScheduleFileTest, ALongOrBinaryLineIsRefusedAndNotEchoedRaw) {
  const std::string e = error_of(std::string(kScheduleMagic) + "\n\x1b[31mevil\x01 1\n");
  EXPECT_NE(e.find("\\x1b[31mevil\\x01"), std::string::npos) << e;
  EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
  EXPECT_NE(error_of(std::string(1 << 20, 'a')).find("longer than 64 bytes"), std::string::npos);
}

TEST_F(ScheduleFileTest, DevZeroIsRefusedAfterOneLine) {
  try {
    read_schedule_file("/dev/zero");
    ADD_FAILURE() << "read /dev/zero";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("longer than 64 bytes"), std::string::npos) << e.what();
  }
}

TEST_F(ScheduleFileTest, TheUnsafeSwitchIsWrittenAndReadBack) {
  ScheduleFile f;
  f.options.ranks = 4;
  f.options.unsafe_live_sends = true;
  f.record.choices = {1, 2};
  f.record.runnable_hash = {3, 4};
  f.record.preempted = {0, 0};
  const std::string text = schedule_file_text(f);
  EXPECT_NE(text.find("\nunsafe-live-sends 1\n"), std::string::npos) << text;
  std::ofstream(path_) << text;
  const ScheduleFile back = read_schedule_file(path_);
  EXPECT_TRUE(back.options.unsafe_live_sends);
  EXPECT_EQ(back.record.choices, f.record.choices);
  EXPECT_EQ(back.record.runnable_hash, f.record.runnable_hash);
}

}  // namespace
}  // namespace dtsim::schedule
