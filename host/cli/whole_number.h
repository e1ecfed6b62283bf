// The one checked reading of a whole number written by a user in a launch
// setting (an accelerate key or flag, a hostfile's slots=N, Slurm's task
// count): the whole text is a base-10 integer within [min, max] ("2abc",
// "", " 2", "2.0" and anything outside the range are refused, never read in
// part or wrapped).
//
// Thread-safety: pure.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace accel::cli {

inline std::optional<int64_t> whole_number(std::string_view text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < min || value > max) return std::nullopt;
  return value;
}

}  // namespace accel::cli
