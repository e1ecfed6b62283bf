// The tokenizer.json pipeline (see tokenizer.h): its parts are read by
// their own classes; this file holds them together, reads the
// post-processor and runs encode and decode in `tokenizers`' order.
#include "host/tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "host/tokenizer/added_tokens.h"
#include "host/tokenizer/bpe_model.h"
#include "host/tokenizer/decoder.h"
#include "host/tokenizer/json_fields.h"
#include "host/tokenizer/normalizer.h"
#include "host/tokenizer/pre_tokenizer.h"
#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {
namespace {

// The ids TemplateProcessing puts around a single sequence: before and
// after it. ByteLevel's post-processor changes only offsets.
struct PostProcessor {
  std::vector<int64_t> before, after;

  void add(const nlohmann::json& config) {
    if (config.is_null()) return;
    const std::string type = type_of(config, "post_processor");
    const std::string part = "post_processor " + type;
    if (type == "Sequence") {
      for (const auto& inner : array_field(config, "processors", part)) add(inner);
    } else if (type == "TemplateProcessing") {
      if (!before.empty() || !after.empty()) throw std::invalid_argument("two TemplateProcessing post-processors");
      const nlohmann::json& special = config.at("special_tokens");
      bool seen_sequence = false;
      for (const auto& item : array_field(config, "single", part)) {
        if (item.contains("Sequence")) {
          if (seen_sequence) throw std::invalid_argument(part + ": a single template with two sequences");
          seen_sequence = true;
        } else if (item.contains("SpecialToken")) {
          const std::string name = string_field(item["SpecialToken"], "id", part);
          if (!special.contains(name))
            throw std::invalid_argument(part + ": the special token '" + name + "' has no ids");
          for (const auto& id : array_field(special[name], "ids", part)) {
            (seen_sequence ? after : before).push_back(id.get<int64_t>());
          }
        } else {
          throw std::invalid_argument(part + ": a template item " + item.dump() +
                                      " is neither Sequence nor SpecialToken");
        }
      }
    } else if (type != "ByteLevel") {
      throw std::invalid_argument("the post_processor " + type +
                                  " is not supported (accel-host reads TemplateProcessing, ByteLevel and Sequence)");
    }
  }
};

}  // namespace

struct Tokenizer::Parts {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedTokens added;
  Decoder decoder;
  PostProcessor post;

  explicit Parts(const nlohmann::json& root)
      : normalizer(root.value("normalizer", nlohmann::json())),
        pre_tokenizer(root.value("pre_tokenizer", nlohmann::json())),
        model(checked_model(root)),
        added(root.value("added_tokens", nlohmann::json()), normalizer),
        decoder(root.value("decoder", nlohmann::json())) {
    post.add(root.value("post_processor", nlohmann::json()));
    read_truncation(root.value("truncation", nlohmann::json()));
    const nlohmann::json padding = root.value("padding", nlohmann::json());
    // Padding to the batch's longest sequence leaves one sequence as it is;
    // a fixed length or a multiple would pad it.
    if (!padding.is_null() && (padding.value("strategy", nlohmann::json()) != "BatchLongest" ||
                               !padding.value("pad_to_multiple_of", nlohmann::json()).is_null())) {
      throw std::invalid_argument("padding " + padding.dump() + " is not supported (only BatchLongest)");
    }
  }

  // Truncation keeps max_length ids (less the post-processor's) from the
  // start ("Right") or the end ("Left"), as `tokenizers` truncates one sequence.
  void read_truncation(const nlohmann::json& config) {
    if (config.is_null()) return;
    max_length = int_field(config, "max_length", "truncation");
    if (max_length < 0) throw std::invalid_argument("truncation's max_length is negative");
    const auto direction = config.value("direction", std::string("Right"));
    if (direction != "Right" && direction != "Left") {
      throw std::invalid_argument("truncation's direction '" + direction + "' is neither Right nor Left");
    }
    truncate_left = direction == "Left";
  }

  std::optional<int64_t> max_length;
  bool truncate_left = false;

  static const nlohmann::json& checked_model(const nlohmann::json& root) {
    if (!root.is_object() || !root.contains("model")) throw std::invalid_argument("no \"model\"");
    const nlohmann::json& model = root["model"];
    const std::string type = model.is_object() && !model.contains("type") ? "BPE" : type_of(model, "model");
    if (type != "BPE") throw std::invalid_argument("the model " + type + " is not supported (accel-host reads BPE)");
    return model;
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(const std::string& json, const std::string& name) {
  try {
    const nlohmann::json root = nlohmann::json::parse(json);
    if (!root.is_object()) throw std::invalid_argument("not a tokenizer.json (not a JSON object)");
    return Tokenizer(std::make_unique<Parts>(root));
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(name + ": not a tokenizer.json: " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(name + ": " + e.what());
  }
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& file_or_dir) {
  const std::filesystem::path file =
      std::filesystem::is_directory(file_or_dir) ? file_or_dir / "tokenizer.json" : file_or_dir;
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw std::invalid_argument(file.string() + ": cannot be read (a tokenizer.json, or a directory holding one)");
  std::ostringstream text;
  text << in.rdbuf();
  return from_json(text.str(), file.string());
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Parts& p = *parts_;
  std::vector<int64_t> ids;
  std::vector<Piece> pieces;
  for (Segment& segment : p.added.extract_and_normalize(utf8_to_u32(text), p.normalizer)) {
    if (segment.id) {
      ids.push_back(*segment.id);
      continue;
    }
    pieces.assign(1, std::move(segment.text));
    p.pre_tokenizer.pre_tokenize(pieces);
    for (const Piece& piece : pieces) p.model.tokenize(u32_to_utf8(piece.text), ids);
  }
  if (p.max_length) {
    const int64_t added = add_special_tokens ? static_cast<int64_t>(p.post.before.size() + p.post.after.size()) : 0;
    if (*p.max_length < added) {
      throw std::invalid_argument("truncation's max_length is smaller than the post-processor's special tokens");
    }
    const auto keep = static_cast<size_t>(*p.max_length - added);
    if (ids.size() > keep) ids.erase(p.truncate_left ? ids.begin() : ids.begin() + static_cast<std::ptrdiff_t>(keep),
                                     p.truncate_left ? ids.end() - static_cast<std::ptrdiff_t>(keep) : ids.end());
  }
  if (add_special_tokens) {
    ids.insert(ids.begin(), p.post.before.begin(), p.post.before.end());
    ids.insert(ids.end(), p.post.after.begin(), p.post.after.end());
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  const Parts& p = *parts_;
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    if (const AddedToken* added = p.added.by_id(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(u32_to_utf8(added->matched));
    } else if (const std::string* token = p.model.id_to_token(id)) {
      tokens.push_back(*token);
    }  // an id no token has is left out, as there

  }
  return p.decoder.decode(std::move(tokens));
}

int64_t Tokenizer::vocab_size() const { return std::max(parts_->model.max_id(), parts_->added.max_id()) + 1; }

std::optional<int64_t> Tokenizer::token_to_id(const std::string& token) const {
  if (const auto id = parts_->added.id_of(token)) return id;
  return parts_->model.token_to_id(token);
}

}  // namespace accel::tokenizer
