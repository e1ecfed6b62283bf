// Unicode for the tokenizer: UTF-8 to code points and back (with Rust's
// String::from_utf8_lossy replacement, which the `tokenizers` package's
// decoders use), and the character classes its pre-tokenizer regexes and
// Digits use: \p{L}, \p{N} (tables from scripts/gen_unicode_tables.py) and
// \s (Unicode White_Space, as Oniguruma, the `tokenizers` regex engine,
// matches it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace accel::tokenizer {

bool is_letter(char32_t c);
bool is_number(char32_t c);
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
