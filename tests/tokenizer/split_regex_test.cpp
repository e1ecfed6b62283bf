// The pre-tokenizer regex subset (host/tokenizer/split_regex.h): GPT-2's and
// Llama 3's patterns split as Oniguruma splits them (the cases the
// `tokenizers` package gives; tests/python/test_tokenizer.py compares whole
// files), and every construct outside the subset is refused by name.
#include "host/tokenizer/split_regex.h"

#include <gtest/gtest.h>

#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {
namespace {

const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> split(const char* pattern, const std::string& text) {
  const std::u32string chars = utf8_to_u32(text);
  std::vector<std::string> parts;
  for (const auto& [begin, end] : SplitRegex(pattern).find_all(chars))
    parts.push_back(u32_to_utf8(chars.substr(begin, end - begin)));
  return parts;
}

TEST(SplitRegex, Gpt2KeepsTheLastSpaceOfARunForTheNextWord) {
  EXPECT_EQ(split(kGpt2, "Hello   world's 2024!!\n"),
            (std::vector<std::string>{"Hello", "  ", " world", "'s", " 2024", "!!", "\n"}));
}

TEST(SplitRegex, Llama3FoldsCaseInContractionsAndGroupsThreeDigits) {
  EXPECT_EQ(
      split(kLlama3, "I'LL pay 1234567 \xC3\xA9t\xC3\xA9.\n\nOk"),
      (std::vector<std::string>{"I", "'LL", " pay", " ", "123", "456", "7", " \xC3\xA9t\xC3\xA9", ".\n\n", "Ok"}));
  EXPECT_EQ(split(kLlama3, "'\xC5\xBF"), (std::vector<std::string>{"'\xC5\xBF"}));  // U+017F folds to s
}

TEST(SplitRegex, O200kCategoriesAndAnOptionalGroup) {
  const char* o200k =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(split(o200k, "HelloWorld's JSONParser x'LL"),
            (std::vector<std::string>{"Hello", "World's", " JSONParser", " x'LL"}));
}

TEST(SplitRegex, LookaheadAtTheEndOfTheText) {
  EXPECT_EQ(split(R"(\s+(?!\S)|\s+)", "a  "), (std::vector<std::string>{"  "}));
  EXPECT_EQ(split(R"(\s+(?!\S)|\s+)", "  b"), (std::vector<std::string>{" ", " "}));
}

TEST(SplitRegex, RefusesConstructsOutsideTheSubsetByName) {
  const auto refusal = [](const char* pattern) {
    try {
      SplitRegex regex(pattern);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(R"([\p{Lu}\p{P}]+)").find("'\\p{P}'"), std::string::npos) << refusal(R"([\p{Lu}\p{P}]+)");
  EXPECT_NE(refusal(R"(\d+)").find("'\\d'"), std::string::npos);
  EXPECT_NE(refusal(R"(a.b)").find("'.'"), std::string::npos);
  EXPECT_NE(refusal(R"(a+?)").find("lazy"), std::string::npos);
  EXPECT_NE(refusal(R"((?=a))").find("(?="), std::string::npos);
  EXPECT_NE(refusal(R"((?!a)+)").find("quantified lookahead"), std::string::npos);
  EXPECT_NE(refusal(R"((?:ab)*)").find("a group repeated more than once"), std::string::npos);
  EXPECT_NE(refusal(R"([abc)").find("unclosed"), std::string::npos);
}

}  // namespace
}  // namespace accel::tokenizer
