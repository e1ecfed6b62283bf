// accel_tokenizer_probe TOKENIZER_JSON: the C++ tokenizer's answers for
// tests/python/test_tokenizer.py. Each stdin line is JSON: a string, whose
// stdout line is an object of its ids without and with the post-processor's
// special tokens and their decodings (the first with special tokens, the
// second without); or a list of ids, whose line is their decodings. A
// tokenizer that cannot be read: one line on stderr, exit 2.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "host/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: accel_tokenizer_probe TOKENIZER_JSON < lines of JSON strings\n", stderr);
    return 2;
  }
  try {
    const auto tokenizer = accel::tokenizer::Tokenizer::from_file(argv[1]);
    std::string line;
    while (std::getline(std::cin, line)) {
      const nlohmann::json input = nlohmann::json::parse(line);
      nlohmann::json out;
      if (input.is_array()) {
        const auto ids = input.get<std::vector<int64_t>>();
        out["decoded"] = tokenizer.decode(ids, false);
        out["decoded_skip"] = tokenizer.decode(ids, true);
      } else {
        const std::string text = input.get<std::string>();
        const auto ids = tokenizer.encode(text, false);
        out["ids"] = ids;
        out["ids_special"] = tokenizer.encode(text, true);
        out["decoded"] = tokenizer.decode(ids, false);
        out["decoded_skip"] = tokenizer.decode(out["ids_special"].get<std::vector<int64_t>>(), true);
      }
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
