// GPT-2's bytes_to_unicode table (see byte_level.h).
#include "host/tokenizer/byte_level.h"

namespace accel::tokenizer {
namespace {

// The printable bytes stand for themselves; the other 68 take 256, 257, ...
// in byte order.
const std::array<char32_t, 256>& byte_chars() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> chars{};
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      chars[b] = printable ? b : next++;
    }
    return chars;
  }();
  return table;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return byte_chars()[b]; }

std::optional<unsigned char> char_to_byte(char32_t c) {
  if (c < 256 && byte_chars()[c] == c) return static_cast<unsigned char>(c);
  if (c >= 256 && c < 256 + 68) {
    for (unsigned b = 0; b < 256; ++b) {
      if (byte_chars()[b] == c) return static_cast<unsigned char>(b);
    }
  }
  return std::nullopt;
}

std::u32string bytes_to_chars(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  for (char byte : utf8) out.push_back(byte_to_char(static_cast<unsigned char>(byte)));
  return out;
}

}  // namespace accel::tokenizer
