// GPT-2's byte-level alphabet (bytes_to_unicode in openai/gpt-2's
// encoder.py, the ByteLevel pre-tokenizer and decoder of `tokenizers`):
// every byte is one printable code point, so a byte-level BPE vocabulary
// spells any byte sequence with these characters.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace accel::tokenizer {

// The code point that stands for byte b.
char32_t byte_to_char(unsigned char b);

// The byte a code point stands for, or nullopt if it stands for none.
std::optional<unsigned char> char_to_byte(char32_t c);

// UTF-8 text as its bytes' characters (the ByteLevel pre-tokenizer's map).
std::u32string bytes_to_chars(std::string_view utf8);

}  // namespace accel::tokenizer
