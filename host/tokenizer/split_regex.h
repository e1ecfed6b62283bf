// The regular expressions of Hugging Face pre-tokenizers (a Split
// pre-tokenizer's "Regex", ByteLevel's GPT-2 pattern), matched over code
// points the way Oniguruma, the `tokenizers` package's engine, matches them
// (leftmost start, first alternative that succeeds, greedy backtracking).
// Only the subset those files use (GPT-2's, Llama 3's and cl100k's, Qwen2's,
// o200k's and Tekken's patterns): literals, alternation, groups (?:...) and
// (?i:...) (ASCII case folding, plus U+017F and U+212A as Unicode folds
// them), classes [...] and [^...] of characters, ranges, the general
// categories of letters, marks and numbers (\p{L}, \p{Lu}, \p{Ll}, \p{Lt},
// \p{Lm}, \p{Lo}, \p{M}, \p{Mn}, \p{Mc}, \p{Me}, \p{N}, \p{Nd}, \p{Nl},
// \p{No}), \s, \S, \r, \n, \t; the greedy quantifiers ? + * {m,n} (a
// group's only ? or {0,1}); the lookahead (?!...). Any other construct is refused by name
// (std::invalid_argument), so a file whose pattern this cannot match
// exactly is never tokenized differently.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {

class SplitRegex {
 public:
  explicit SplitRegex(const std::string& pattern);

  // The [begin, end) code point spans of the successive non-overlapping
  // matches, as a left-to-right search finds them (empty matches skipped).
  std::vector<std::pair<size_t, size_t>> find_all(std::u32string_view text) const;

 private:
  struct ClassItem {
    enum Kind { Range, Categories, Space, NotSpace } kind;
    char32_t low = 0, high = 0;
    CategorySet categories = 0;
  };
  struct Atom {
    enum Kind { Literal, Class, Group, NegativeLookahead } kind = Literal;
    char32_t literal = 0;
    bool fold_case = false;
    bool negated = false;
    std::vector<ClassItem> items;
    size_t group = 0;  // an index into groups_ (Group, NegativeLookahead)
    size_t min = 1, max = 1;
  };
  using Sequence = std::vector<Atom>;
  using Alternation = std::vector<Sequence>;
  class Parser;
  class Matcher;

  bool matches_char(const Atom& atom, char32_t c) const;

  std::string pattern_;
  std::vector<Alternation> groups_;  // groups_[0]: the whole pattern
};

}  // namespace accel::tokenizer
