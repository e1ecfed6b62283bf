// Unicode Normalization Form C (canonical decomposition, canonical
// ordering, canonical composition: UAX #15), the NFC normalizer of Qwen2,
// Qwen2.5 and Qwen3's tokenizer.json, from the tables
// scripts/gen_unicode_tables.py generates (unicode_nfc.inc).
#pragma once

#include <string>

namespace accel::tokenizer {

std::u32string nfc(const std::u32string& text);

}  // namespace accel::tokenizer
