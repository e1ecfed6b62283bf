// YAML read as PyYAML's `yaml.safe_load` reads the files accelerate writes
// (accelerate's config is read that way): one document only (a second one
// is refused, as safe_load refuses it), a key given twice keeps its last
// value, keys are plain scalars, and only the standard tags (!!str, !!int,
// !!bool, !!float, !!null, !!seq, !!map) are accepted (safe_load refuses a
// !!python/... tag). yaml-cpp parses; its nesting bound (DeepRecursion)
// bounds the tree, so the copy here recurses no deeper than it did, and the
// copy holds at most 100,000 values (aliases repeated included).
//
// Thread-safety: reentrant.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace accel::cli {

struct YamlEntry;

struct YamlValue {
  enum class Kind { null, scalar, list, map };
  Kind kind = Kind::null;
  std::string scalar;                                        // Kind::scalar
  std::vector<YamlValue> items;                              // Kind::list
  std::vector<YamlEntry> entries;                            // Kind::map, each key once, in first-seen order

  // A map's value under `key`, or nullptr.
  const YamlValue* find(const std::string& key) const;
};

struct YamlEntry {
  std::string key;
  YamlValue value;
};

// One line saying what is wrong and where (yaml-cpp's line and column).
class YamlError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The document in `text`; Kind::null for an empty stream (safe_load's None).
YamlValue safe_load(const std::string& text);

}  // namespace accel::cli
