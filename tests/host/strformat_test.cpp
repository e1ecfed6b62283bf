// The human-readable units of the progress line.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "host/util/strformat.h"

namespace {

TEST(FormatDuration, SecondsMinutesHours) {
  EXPECT_EQ(accel::format_duration(0), "0s");
  EXPECT_EQ(accel::format_duration(42.4), "42s");
  EXPECT_EQ(accel::format_duration(59.6), "1m00s");
  EXPECT_EQ(accel::format_duration(187), "3m07s");
  EXPECT_EQ(accel::format_duration(7500), "2h05m");
  EXPECT_EQ(accel::format_duration(100 * 3600.0), "100h00m");
}

TEST(FormatDuration, NonsenseIsAQuestionMark) {
  EXPECT_EQ(accel::format_duration(-1), "?");
  EXPECT_EQ(accel::format_duration(std::numeric_limits<double>::infinity()), "?");
  EXPECT_EQ(accel::format_duration(std::nan("")), "?");
}

TEST(FormatBytes, PicksTheUnit) {
  EXPECT_EQ(accel::format_bytes(512), "512 B");
  EXPECT_EQ(accel::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(accel::format_bytes(3.0 * 1024 * 1024 * 1024), "3.00 GiB");
}

}  // namespace
