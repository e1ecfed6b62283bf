// The pre-tokenizer regex subset (see split_regex.h): a recursive-descent
// parser into alternations of atoms, and a backtracking matcher whose
// continuations give Oniguruma's order of trying alternatives and counts.
#include "host/tokenizer/split_regex.h"

#include <functional>
#include <limits>
#include <stdexcept>

#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {
namespace {

constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();

// Simple case folding of the characters that fold onto ASCII letters.
char32_t fold(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
  if (c == 0x017F) return 's';  // LATIN SMALL LETTER LONG S
  if (c == 0x212A) return 'k';  // KELVIN SIGN
  return c;
}

}  // namespace

class SplitRegex::Parser {
 public:
  Parser(SplitRegex& regex, std::u32string text) : regex_(regex), text_(std::move(text)) {}

  void parse() {
    regex_.groups_.emplace_back();
    parse_alternation(0, false);
    if (pos_ != text_.size()) refuse("an unbalanced ')'");
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const {
    throw std::invalid_argument("pre-tokenizer regex '" + regex_.pattern_ + "': " + what +
                                " is not supported (accel-host reads a subset: host/tokenizer/split_regex.h)");
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char32_t peek() const { return text_[pos_]; }

  void parse_alternation(size_t group, bool fold_case) {
    Alternation alternatives(1);
    while (!at_end() && peek() != ')') {
      if (peek() == '|') {
        ++pos_;
        alternatives.emplace_back();
        continue;
      }
      alternatives.back().push_back(parse_quantified(fold_case));
    }
    regex_.groups_[group] = std::move(alternatives);
  }

  size_t parse_group_body(bool fold_case) {
    const size_t group = regex_.groups_.size();
    regex_.groups_.emplace_back();
    parse_alternation(group, fold_case);
    if (at_end()) refuse("an unclosed '('");
    ++pos_;
    return group;
  }

  Atom parse_quantified(bool fold_case) {
    Atom atom = parse_atom(fold_case);
    if (at_end()) return atom;
    const char32_t c = peek();
    if (c == '?' || c == '+' || c == '*' || c == '{') {
      if (atom.kind == Atom::NegativeLookahead) refuse("a quantified lookahead");
      ++pos_;
      if (c == '?') atom.min = 0, atom.max = 1;
      if (c == '+') atom.min = 1, atom.max = kUnbounded;
      if (c == '*') atom.min = 0, atom.max = kUnbounded;
      if (c == '{') parse_counts(atom);
      if (!at_end() && (peek() == '?' || peek() == '+')) refuse("a lazy or possessive quantifier");
      // One optional group (o200k's contractions) at most: deeper repetition
      // would recurse once per repetition over the whole prompt.
      if (atom.kind == Atom::Group && atom.max > 1) refuse("a group repeated more than once");
    }
    return atom;
  }

  size_t parse_count() {
    size_t value = 0, digits = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9' && digits < 6)
      value = value * 10 + (text_[pos_++] - '0'), ++digits;
    if (digits == 0) refuse("a '{' that is not a count {m,n}");
    return value;
  }

  void parse_counts(Atom& atom) {
    atom.min = parse_count();
    atom.max = atom.min;
    if (!at_end() && peek() == ',') {
      ++pos_;
      atom.max = (!at_end() && peek() == '}') ? kUnbounded : parse_count();
    }
    if (at_end() || peek() != '}' || atom.max < atom.min) refuse("a malformed count {m,n}");
    ++pos_;
  }

  Atom parse_atom(bool fold_case) {
    Atom atom;
    atom.fold_case = fold_case;
    const char32_t c = text_[pos_++];
    if (c == '(') {
      if (at_end() || peek() != '?') {
        atom.kind = Atom::Group;  // a capturing group matches as a plain one
        atom.group = parse_group_body(fold_case);
        return atom;
      }
      ++pos_;
      if (text_.compare(pos_, 2, U"i:") == 0) {
        pos_ += 2;
        atom.kind = Atom::Group;
        atom.group = parse_group_body(true);
      } else if (text_.compare(pos_, 1, U":") == 0) {
        pos_ += 1;
        atom.kind = Atom::Group;
        atom.group = parse_group_body(fold_case);
      } else if (text_.compare(pos_, 1, U"!") == 0) {
        pos_ += 1;
        atom.kind = Atom::NegativeLookahead;
        atom.group = parse_group_body(fold_case);
      } else {
        refuse("the group '(?" + u32_to_utf8(text_.substr(pos_, 2)) + "'");
      }
      return atom;
    }
    if (c == '[') {
      atom.kind = Atom::Class;
      parse_class(atom);
      return atom;
    }
    if (c == '\\') {
      ClassItem item = parse_escape();
      if (item.kind == ClassItem::Range) {
        atom.literal = item.low;
      } else {
        atom.kind = Atom::Class;
        atom.items.push_back(item);
      }
      return atom;
    }
    if (c == '.' || c == '^' || c == '$' || c == ')' || c == '|') refuse(std::string("'") + static_cast<char>(c) + "'");
    if (c == '?' || c == '+' || c == '*' || c == '{') refuse("a quantifier with nothing to repeat");
    atom.literal = c;
    return atom;
  }

  // The general categories \p{name} names: a major class or one category.
  CategorySet categories(const std::string& name) const {
    using G = GeneralCategory;
    static const std::pair<const char*, G> kNames[] = {{"Lu", G::Lu}, {"Ll", G::Ll}, {"Lt", G::Lt}, {"Lm", G::Lm},
                                                       {"Lo", G::Lo}, {"Mn", G::Mn}, {"Mc", G::Mc}, {"Me", G::Me},
                                                       {"Nd", G::Nd}, {"Nl", G::Nl}, {"No", G::No}};
    CategorySet set = 0;
    for (const auto& [category_name, category] : kNames) {
      if (name == category_name || (name.size() == 1 && name[0] == category_name[0])) set |= category_bit(category);
    }
    if (set == 0) refuse("the class '\\p{" + name + "}'");
    return set;
  }

  // After a backslash: a class (\p{...}, \s, \S) or one character.
  ClassItem parse_escape() {
    if (at_end()) refuse("a trailing '\\'");
    const char32_t c = text_[pos_++];
    ClassItem item{ClassItem::Range};
    if (c == 'p') {
      const size_t close = text_.find(U'}', pos_);
      if (pos_ >= text_.size() || peek() != '{' || close == std::u32string::npos) refuse("a '\\p' without {NAME}");
      const std::string name = u32_to_utf8(text_.substr(pos_ + 1, close - pos_ - 1));
      item.kind = ClassItem::Categories;
      item.categories = categories(name);
      pos_ = close + 1;
      return item;
    }
    if (c == 's') item.kind = ClassItem::Space;
    else if (c == 'S') item.kind = ClassItem::NotSpace;
    else if (c == 'r') item.low = item.high = '\r';
    else if (c == 'n') item.low = item.high = '\n';
    else if (c == 't') item.low = item.high = '\t';
    else if ((c < '0' || c > '9') && (fold(c) < 'a' || fold(c) > 'z') && c < 0x80) item.low = item.high = c;
    else refuse(std::string("the escape '\\") + u32_to_utf8(std::u32string(1, c)) + "'");
    return item;
  }

  void parse_class(Atom& atom) {
    if (!at_end() && peek() == '^') atom.negated = true, ++pos_;
    bool first = true;
    while (true) {
      if (at_end()) refuse("an unclosed '['");
      char32_t c = text_[pos_++];
      if (c == ']' && !first) return;
      first = false;
      if (c == '[') refuse("a nested class or POSIX bracket '['");
      ClassItem item{ClassItem::Range};
      if (c == '\\') {
        item = parse_escape();
      } else {
        item.low = item.high = c;
      }
      if (item.kind == ClassItem::Range && pos_ + 1 < text_.size() && peek() == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        char32_t high = text_[pos_++];
        if (high == '\\') {
          const ClassItem end = parse_escape();
          if (end.kind != ClassItem::Range) refuse("a range ending in a class");
          high = end.low;
        }
        if (high < item.low) refuse("a reversed range");
        item.high = high;
      }
      atom.items.push_back(item);
    }
  }

  SplitRegex& regex_;
  std::u32string text_;
  size_t pos_ = 0;
};

class SplitRegex::Matcher {
 public:
  using Continuation = std::function<bool(size_t)>;
  Matcher(const SplitRegex& regex, std::u32string_view text) : regex_(regex), text_(text) {}

  bool alternation(size_t group, size_t pos, const Continuation& next) const {
    for (const Sequence& sequence : regex_.groups_[group]) {
      if (this->sequence(sequence, 0, pos, next)) return true;
    }
    return false;
  }

 private:
  bool sequence(const Sequence& atoms, size_t index, size_t pos, const Continuation& next) const {
    if (index == atoms.size()) return next(pos);
    const Atom& atom = atoms[index];
    const auto rest = [&](size_t at) { return sequence(atoms, index + 1, at, next); };
    if (atom.kind == Atom::NegativeLookahead) {
      if (alternation(atom.group, pos, [](size_t) { return true; })) return false;
      return rest(pos);
    }
    if (atom.kind == Atom::Group) return repeat(atom, 0, pos, rest);
    size_t count = 0;
    while (count < atom.max && pos + count < text_.size() && regex_.matches_char(atom, text_[pos + count])) ++count;
    if (count < atom.min) return false;
    for (size_t taken = count;; --taken) {
      if (rest(pos + taken)) return true;
      if (taken == atom.min) return false;
    }
  }

  // A quantified group (at most once: the parser's rule), greedily: one
  // more repetition first, then the rest (a repetition that consumes
  // nothing ends the loop, as Oniguruma's does).
  bool repeat(const Atom& atom, size_t count, size_t pos, const Continuation& rest) const {
    if (count < atom.max && alternation(atom.group, pos, [&](size_t at) {
          return at != pos && repeat(atom, count + 1, at, rest);
        })) {
      return true;
    }
    return count >= atom.min && rest(pos);
  }

  const SplitRegex& regex_;
  std::u32string_view text_;
};

SplitRegex::SplitRegex(const std::string& pattern) : pattern_(pattern) {
  std::u32string text;
  try {
    text = utf8_to_u32(pattern);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("pre-tokenizer regex: the pattern is not valid UTF-8");
  }
  Parser(*this, std::move(text)).parse();
}

bool SplitRegex::matches_char(const Atom& atom, char32_t c) const {
  if (atom.kind == Atom::Literal) return atom.fold_case ? fold(c) == fold(atom.literal) : c == atom.literal;
  bool found = false;
  for (const ClassItem& item : atom.items) {
    switch (item.kind) {
      case ClassItem::Range:
        found = atom.fold_case
                    ? (fold(c) >= fold(item.low) && fold(c) <= fold(item.high)) || (c >= item.low && c <= item.high)
                    : c >= item.low && c <= item.high;
        break;
      case ClassItem::Categories: found = in_categories(c, item.categories); break;
      case ClassItem::Space: found = is_whitespace(c); break;
      case ClassItem::NotSpace: found = !is_whitespace(c); break;
    }
    if (found) break;
  }
  return found != atom.negated;
}

std::vector<std::pair<size_t, size_t>> SplitRegex::find_all(std::u32string_view text) const {
  std::vector<std::pair<size_t, size_t>> spans;
  const Matcher matcher(*this, text);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = 0;
    size_t start = pos;
    for (; start < text.size(); ++start) {
      if (matcher.alternation(0, start, [&](size_t at) { end = at; return true; })) break;
    }
    if (start == text.size()) break;
    if (end > start) {
      spans.emplace_back(start, end);
      pos = end;
    } else {
      pos = start + 1;
    }
  }
  return spans;
}

}  // namespace accel::tokenizer
