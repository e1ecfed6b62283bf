// NFC (see nfc.h): UAX #15's algorithm over the generated tables, Hangul
// syllables by their arithmetic.
#include "host/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace accel::tokenizer {
namespace {

struct ClassRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t code, first, second;  // second 0: a singleton
  bool composes;
};

#include "host/tokenizer/unicode_nfc.inc"

constexpr char32_t kHangulBase = 0xAC00, kLeadBase = 0x1100, kVowelBase = 0x1161, kTrailBase = 0x11A7;
constexpr char32_t kVowels = 21, kTrails = 28, kSyllables = 11172;

uint8_t combining_class(char32_t c) {
  const auto* it = std::upper_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), c,
                                    [](char32_t value, const ClassRange& r) { return value < r.first; });
  return it != std::begin(kCombiningClasses) && c <= (it - 1)->last ? (it - 1)->ccc : 0;
}

const Decomposition* decomposition(char32_t c) {
  const auto* it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), c,
                                    [](const Decomposition& d, char32_t value) { return d.code < value; });
  return it != std::end(kDecompositions) && it->code == c ? it : nullptr;
}

void decompose(char32_t c, std::u32string& out) {
  if (c >= kHangulBase && c < kHangulBase + kSyllables) {
    const char32_t index = c - kHangulBase;
    out.push_back(kLeadBase + index / (kVowels * kTrails));
    out.push_back(kVowelBase + (index % (kVowels * kTrails)) / kTrails);
    if (index % kTrails != 0) out.push_back(kTrailBase + index % kTrails);
    return;
  }
  const Decomposition* d = decomposition(c);
  if (!d) {
    out.push_back(c);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

// The primary composite of a pair, or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLeadBase && first < kLeadBase + 19 && second >= kVowelBase && second < kVowelBase + kVowels) {
    return kHangulBase + ((first - kLeadBase) * kVowels + (second - kVowelBase)) * kTrails;
  }
  if (first >= kHangulBase && first < kHangulBase + kSyllables && (first - kHangulBase) % kTrails == 0 &&
      second > kTrailBase && second < kTrailBase + kTrails) {
    return first + (second - kTrailBase);
  }
  static const std::unordered_map<uint64_t, char32_t> pairs = [] {
    std::unordered_map<uint64_t, char32_t> map;
    for (const Decomposition& d : kDecompositions) {
      if (d.composes) map[(static_cast<uint64_t>(d.first) << 32) | d.second] = d.code;
    }
    return map;
  }();
  const auto it = pairs.find((static_cast<uint64_t>(first) << 32) | second);
  return it == pairs.end() ? 0 : it->second;
}

}  // namespace

std::u32string nfc(const std::u32string& text) {
  std::u32string chars;
  chars.reserve(text.size());
  for (char32_t c : text) decompose(c, chars);
  // Canonical ordering: each run of non-starters stably sorted by class.
  for (size_t i = 0; i < chars.size();) {
    if (combining_class(chars[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < chars.size() && combining_class(chars[end]) != 0) ++end;
    std::stable_sort(chars.begin() + static_cast<std::ptrdiff_t>(i), chars.begin() + static_cast<std::ptrdiff_t>(end),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
  // Canonical composition: a character joins the last starter unless a
  // character between them blocks it (a class of 0, or not below its own).
  if (chars.empty()) return chars;
  size_t starter = 0, kept = 1;
  int last_class = combining_class(chars[0]) == 0 ? 0 : 256;
  for (size_t i = 1; i < chars.size(); ++i) {
    const char32_t c = chars[i];
    const int c_class = combining_class(c);
    const char32_t composite = compose(chars[starter], c);
    if (composite != 0 && (last_class < c_class || last_class == 0)) {
      chars[starter] = composite;
      continue;
    }
    if (c_class == 0) starter = kept;
    last_class = c_class;
    chars[kept++] = c;
  }
  chars.resize(kept);
  return chars;
}

}  // namespace accel::tokenizer
