// The C++ tokenizer.json reader (host/tokenizer/tokenizer.h) on small
// hand-written files: BPE merge order, byte fallback and fused unknowns,
// added tokens, decoders, UTF-8 handling, and the one-line refusals of what
// it does not implement. tests/python/test_tokenizer.py compares it with
// the `tokenizers` package on trained files of each family's configuration.
#include "host/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "host/tokenizer/byte_level.h"
#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {
namespace {

using Ids = std::vector<int64_t>;

// SentencePiece-style: characters a, b, c, "▁", the byte tokens of
// "\n" and "é"'s two bytes, an unknown token; merges a b -> ab (rank 0),
// b c -> bc (1), ab c -> abc (2), ▁ a -> ▁a (3).
nlohmann::json sentencepiece_file() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"a", 2}, {"b", 3}, {"c", 4}, {"\xE2\x96\x81", 5},
                          {"<0x0A>", 6}, {"<0xC3>", 7}, {"<0xA9>", 8}, {"ab", 9}, {"bc", 10}, {"abc", 11},
                          {"\xE2\x96\x81" "a", 12}};
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", {"a b", "b c", "ab c", "\xE2\x96\x81 a"}}}}};
}

Tokenizer load(const nlohmann::json& file) { return Tokenizer::from_json(file.dump(), "test.json"); }

TEST(Tokenizer, MergesTheLowestRankFirst) {
  const Tokenizer tokenizer = load(sentencepiece_file());
  // "▁abc": ▁ a (3) loses to a b (0), then ab c (2): ▁ abc.
  EXPECT_EQ(tokenizer.encode("abc", false), (Ids{5, 11}));
  // "▁bca": b c (1) first, then nothing joins ▁ bc a.
  EXPECT_EQ(tokenizer.encode("bca", false), (Ids{5, 10, 2}));
  EXPECT_EQ(tokenizer.encode("a", false), (Ids{12}));
  nlohmann::json pairs = sentencepiece_file();
  using Json = nlohmann::json;
  pairs["model"]["merges"] = Json::array({Json::array({"a", "b"}), Json::array({"b", "c"}), Json::array({"ab", "c"}),
                                          Json::array({"\xE2\x96\x81", "a"})});
  EXPECT_EQ(load(pairs).encode("abc bca", false), tokenizer.encode("abc bca", false));
}

TEST(Tokenizer, BytesFallBackAndUnknownsFuse) {
  const Tokenizer tokenizer = load(sentencepiece_file());
  EXPECT_EQ(tokenizer.encode("\xC3\xA9\n", false), (Ids{5, 7, 8, 6}));
  EXPECT_EQ(tokenizer.encode("xyz", false), (Ids{5, 0}));  // no byte tokens for x, y, z: one fused <unk>
  EXPECT_EQ(tokenizer.decode({5, 7, 8, 6, 2}, false), "\xC3\xA9\na");
  EXPECT_EQ(tokenizer.decode({7, 2}, false), "\xEF\xBF\xBD" "a");  // a lone lead byte
}

TEST(Tokenizer, SpecialTokensSplitOutAndThePostProcessorAddsThem) {
  const Tokenizer tokenizer = load(sentencepiece_file());
  EXPECT_EQ(tokenizer.encode("a<s>a", false), (Ids{12, 1, 12}));  // each piece normalized on its own
  EXPECT_EQ(tokenizer.encode("a", true), (Ids{1, 12}));
  EXPECT_EQ(tokenizer.decode({1, 12, 5, 2}, true), "a a");
  EXPECT_EQ(tokenizer.decode({1, 12}, false), "<s> a");
  EXPECT_EQ(tokenizer.vocab_size(), 13);
  nlohmann::json sparse = sentencepiece_file();
  sparse["model"]["vocab"]["z"] = 2'000'000'000;  // ids need not be dense, nor cost memory up to the largest
  EXPECT_EQ(load(sparse).vocab_size(), 2'000'000'001);
  EXPECT_EQ(load(sparse).decode({2'000'000'000, 2}, false), "za");
}

TEST(Tokenizer, ByteLevelAlphabet) {
  EXPECT_EQ(byte_to_char(' '), U'\u0120');  // "Ġ"
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');
  EXPECT_EQ(byte_to_char('A'), U'A');
  for (unsigned b = 0; b < 256; ++b) EXPECT_EQ(char_to_byte(byte_to_char(static_cast<unsigned char>(b))), b);
  EXPECT_FALSE(char_to_byte(U'\u0200').has_value());
}

TEST(Tokenizer, LossyUtf8ReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98" "b"), "a\xEF\xBF\xBD" "b");    // a truncated 4-byte sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: three
  EXPECT_THROW(utf8_to_u32("a\xFF"), std::invalid_argument);
}

std::string refusal(nlohmann::json file) {
  try {
    load(file);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Tokenizer, RefusesWhatItDoesNotImplementByName) {
  nlohmann::json file = sentencepiece_file();
  file["model"]["type"] = "WordPiece";
  EXPECT_EQ(refusal(file), "test.json: the model WordPiece is not supported (accel-host reads BPE)");
  file = sentencepiece_file();
  file["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(refusal(file).find("the normalizer NFKC is not supported"), std::string::npos);
  file = sentencepiece_file();
  file["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(refusal(file).find("the pre_tokenizer Whitespace is not supported"), std::string::npos);
  file = sentencepiece_file();
  file["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(refusal(file).find("the decoder WordPiece is not supported"), std::string::npos);
  file = sentencepiece_file();
  file["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\p{P}+"}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_NE(refusal(file).find("'\\p{P}'"), std::string::npos);
  file = sentencepiece_file();
  file["model"]["merges"].push_back("a z");
  EXPECT_NE(refusal(file).find("the merge 'a z' names a token outside the vocabulary"), std::string::npos);
  file = sentencepiece_file();
  file["model"]["merges"].push_back(nlohmann::json::array({"b", "c"}));
  EXPECT_NE(refusal(file).find("mix \"a b\" strings and [a, b] pairs"), std::string::npos);
  EXPECT_NE(refusal(nlohmann::json::array()).find("test.json: not a tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace accel::tokenizer
