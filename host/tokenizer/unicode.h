// Unicode for the tokenizer: UTF-8 to code points and back (with Rust's
// String::from_utf8_lossy replacement, which the `tokenizers` package's
// decoders use), and the character classes its pre-tokenizer regexes and
// Digits use: the general categories of letters, marks and numbers (\p{L},
// \p{Lu}, \p{M}, \p{N}, ...: tables from scripts/gen_unicode_tables.py)
// and \s (Unicode White_Space, as Oniguruma, the `tokenizers` regex
// engine, matches it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace accel::tokenizer {

// The general categories the tables hold; any other is None.
enum class GeneralCategory : uint8_t { Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, None };
GeneralCategory general_category(char32_t c);
// A set of categories as bits (1 << category).
using CategorySet = uint32_t;
constexpr CategorySet category_bit(GeneralCategory c) { return CategorySet{1} << static_cast<unsigned>(c); }
inline bool in_categories(char32_t c, CategorySet set) { return (set & category_bit(general_category(c))) != 0; }

bool is_letter(char32_t c);  // L: Lu Ll Lt Lm Lo
bool is_number(char32_t c);  // N: Nd Nl No
bool is_whitespace(char32_t c);

// The code points of valid UTF-8; std::invalid_argument naming the byte
// offset of the first invalid sequence.
std::u32string utf8_to_u32(std::string_view text);
std::string u32_to_utf8(std::u32string_view text);
void append_utf8(std::string& out, char32_t c);

// Bytes as text, each maximal invalid subsequence replaced by U+FFFD (the
// Unicode "substitution of maximal subparts", Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);

// Whether bytes are valid UTF-8.
bool is_valid_utf8(std::string_view bytes);

}  // namespace accel::tokenizer
