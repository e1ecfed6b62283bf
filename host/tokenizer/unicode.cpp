// Unicode classes and UTF-8 conversions of the tokenizer (see unicode.h).
#include "host/tokenizer/unicode.h"

#include <algorithm>
#include <stdexcept>

namespace accel::tokenizer {
namespace {

struct CategoryRange {
  char32_t first, last;
  uint8_t category;
};

#include "host/tokenizer/unicode_ranges.inc"

// The length of the well-formed UTF-8 sequence at bytes[pos], or the length
// of its maximal invalid prefix as a negative number (at least 1 byte):
// Unicode's table 3-7 of well-formed byte sequences.
int sequence_length(std::string_view bytes, size_t pos, char32_t& value) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) {
    value = lead;
    return 1;
  }
  int length;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    value = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    value = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return -1;
  }
  for (int i = 1; i < length; ++i) {
    if (pos + i >= bytes.size()) return -i;
    const unsigned char next = byte(pos + i);
    if (next < (i == 1 ? low : 0x80) || next > (i == 1 ? high : 0xBF)) return -i;
    value = (value << 6) | (next & 0x3F);
  }
  return length;
}

// Walks bytes sequence by sequence: valid(value, begin, length) for each
// well-formed one, invalid(begin, length) for each maximal invalid subpart;
// either returning false stops the walk (and the result is false).
template <typename Valid, typename Invalid>
bool walk_utf8(std::string_view bytes, Valid valid, Invalid invalid) {
  for (size_t pos = 0; pos < bytes.size();) {
    char32_t value = 0;
    const int length = sequence_length(bytes, pos, value);
    const size_t size = static_cast<size_t>(length > 0 ? length : -length);
    if (!(length > 0 ? valid(value, pos, size) : invalid(pos, size))) return false;
    pos += size;
  }
  return true;
}

}  // namespace

GeneralCategory general_category(char32_t c) {
  const auto* it = std::upper_bound(std::begin(kCategoryRanges), std::end(kCategoryRanges), c,
                                    [](char32_t value, const CategoryRange& r) { return value < r.first; });
  if (it == std::begin(kCategoryRanges) || c > (it - 1)->last) return GeneralCategory::None;
  return static_cast<GeneralCategory>((it - 1)->category);
}

bool is_letter(char32_t c) {
  const GeneralCategory category = general_category(c);
  return category >= GeneralCategory::Lu && category <= GeneralCategory::Lo;
}

bool is_number(char32_t c) {
  const GeneralCategory category = general_category(c);
  return category >= GeneralCategory::Nd && category <= GeneralCategory::No;
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::u32string utf8_to_u32(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  walk_utf8(
      text, [&](char32_t value, size_t, size_t) { return out.push_back(value), true; },
      [](size_t pos, size_t) -> bool { throw std::invalid_argument("invalid UTF-8 at byte " + std::to_string(pos)); });
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string u32_to_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  walk_utf8(
      bytes, [&](char32_t, size_t pos, size_t length) { return out.append(bytes.substr(pos, length)), true; },
      [&](size_t, size_t) { return out += "\xEF\xBF\xBD", true; });
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  return walk_utf8(
      bytes, [](char32_t, size_t, size_t) { return true; }, [](size_t, size_t) { return false; });
}

}  // namespace accel::tokenizer
