// PyYAML safe_load's semantics over yaml-cpp's parser (safe_yaml.h).
#include "host/cli/safe_yaml.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace accel::cli {
namespace {

// yaml-cpp's message (it names line and column) as one bounded line.
std::string one_line(std::string text) {
  constexpr size_t kShown = 200;
  std::replace_if(text.begin(), text.end(), [](unsigned char c) { return c < 0x20; }, ' ');
  return text.size() <= kShown ? text : text.substr(0, kShown) + "...";
}

// Counts documents; the events themselves are not kept.
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

std::string hex_byte(unsigned char c) {
  static const char* hex = "0123456789abcdef";
  return std::string("0x") + hex[c >> 4] + hex[c & 15];
}

std::string where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1);
}

// "?" is a plain scalar's (resolved by its text), "!" a quoted one's (a string).
void check_tag(const YAML::Node& node) {
  static const std::set<std::string> standard = {
      "", "?", "!", "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool",
      "tag:yaml.org,2002:float", "tag:yaml.org,2002:null", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"};
  if (standard.count(node.Tag()) == 0) {
    throw YamlError(where(node) + ": the tag " + one_line(node.Tag().substr(0, 60)) +
                    " is refused (PyYAML's safe_load, which accelerate uses, reads the standard tags only)");
  }
}

// Aliases share a node in yaml-cpp's tree (and in PyYAML's), but the copy
// made here repeats it: a kilobyte of nested aliases ("billion laughs")
// would expand without end, in values or in the text of a repeated scalar
// (accelerate_config_fuzz found both). A config is a few dozen short
// values; far more is refused.
constexpr size_t kMaxValues = 100000;
constexpr size_t kMaxText = 1u << 20;  // the file's own size bound

struct Budget {
  size_t values = kMaxValues;
  size_t text = kMaxText;
};

YamlValue convert(const YAML::Node& node, Budget& budget) {
  if (budget.values-- == 0) {
    throw YamlError("expands to more than " + std::to_string(kMaxValues) +
                    " values (through aliases); an accelerate config holds a few dozen");
  }
  const size_t text = node.IsScalar() ? node.Scalar().size() : 0;
  if (text > budget.text) {
    throw YamlError("expands to more than 1 MiB of text (through aliases); an accelerate config holds a few "
                    "hundred bytes");
  }
  budget.text -= text;
  check_tag(node);
  YamlValue value;
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return value;
    case YAML::NodeType::Scalar:
      value.kind = YamlValue::Kind::scalar;
      value.scalar = node.Scalar();
      return value;
    case YAML::NodeType::Sequence:
      value.kind = YamlValue::Kind::list;
      for (const YAML::Node& item : node) value.items.push_back(convert(item, budget));
      return value;
    case YAML::NodeType::Map:
      value.kind = YamlValue::Kind::map;
      std::map<std::string, size_t> position;  // key -> index in entries
      for (const auto& entry : node) {
        if (!entry.first.IsScalar()) throw YamlError(where(entry.first) + ": a key must be plain text");
        const std::string& key = entry.first.Scalar();
        if (key.size() > budget.text) {
          throw YamlError("expands to more than 1 MiB of text (through aliases); an accelerate config holds a few "
                          "hundred bytes");
        }
        budget.text -= key.size();
        if (key == "<<" && entry.first.Tag() == "?") {
          throw YamlError(where(entry.first) + ": merge keys (<<) are not read here; write the keys out");
        }
        YamlValue child = convert(entry.second, budget);
        // PyYAML builds a dict: a repeated key's last value wins.
        const auto [at, fresh] = position.emplace(key, value.entries.size());
        if (fresh) {
          value.entries.push_back({key, std::move(child)});
        } else {
          value.entries[at->second].value = std::move(child);
        }
      }
      return value;
  }
  return value;
}

}  // namespace

const YamlValue* YamlValue::find(const std::string& key) const {
  for (const auto& [name, value] : entries) {
    if (name == key) return &value;
  }
  return nullptr;
}

YamlValue safe_load(const std::string& text) {
  // PyYAML's reader refuses non-printable characters; yaml-cpp looped
  // without end, allocating, on a NUL byte (accelerate_config_fuzz found it).
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      throw YamlError("holds the control character " + hex_byte(c) + " at byte " + std::to_string(i) +
                      ", which YAML (and PyYAML's safe_load) refuses");
    }
  }
  // Documents counted with a parser of our own, stopping at the second:
  // yaml-cpp's LoadAll looped without end on a ',' outside [ ] and { }
  // (each turn a new empty document; accelerate_config_fuzz found it).
  YAML::Node document;
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentCounter counter;
    int documents = 0;
    while (parser.HandleNextDocument(counter)) {
      if (++documents > 1) {
        throw YamlError("holds more than one YAML document (a second ---, or a ',' outside [ ] and { }); "
                        "accelerate's reader (PyYAML's safe_load) takes one");
      }
    }
    if (documents == 0) return YamlValue{};
    document = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // e.what() is one line: "yaml-cpp: error at line L, column C: ...".
    throw YamlError("not valid YAML: " + one_line(e.what()));
  }
  try {
    Budget budget;
    return convert(document, budget);
  } catch (const YAML::Exception& e) {
    throw YamlError(one_line(e.what()));
  }
}

}  // namespace accel::cli
