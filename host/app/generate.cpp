// accel-host generate (see generate.h).
#include "host/app/generate.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include "host/app/model_weights.h"
#include "host/checkpoint/trainer_state.h"
#include "host/cli/options.h"
#include "host/model/sampling.h"
#include "host/tokenizer/tokenizer.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

const std::string kCommand = "generate";

constexpr const char* kUsage =
    "usage: accel-host generate CHECKPOINT_DIR (--prompt TEXT | --prompt-ids IDS) [options]\n"
    "  Samples what follows the prompt from any Accel checkpoint, through a key/value cache,\n"
    "  and writes only the continuation to stdout (once it is complete).\n"
    "  --prompt TEXT        UTF-8 bytes as tokens (a model trained on --data text:PATH), or with\n"
    "                       --tokenizer the tokenizer's ids of TEXT\n"
    "  --prompt-ids IDS     token ids, separated by spaces or commas (a token-trained model)\n"
    "  --tokenizer PATH     a Hugging Face tokenizer.json or a model directory holding one (BPE:\n"
    "                       GPT-2, Llama, Qwen, Mistral, Gemma, ...): --prompt is encoded with its\n"
    "                       special tokens (Llama's <s>) and the continuation decoded to text\n"
    "  --max-new-tokens N   at most N new tokens (default 64); prompt + N <= the model's seq_len\n"
    "  --temperature T      0: greedy (argmax); else softmax(logits / T) is sampled (default 1)\n"
    "  --top-k K            sample among the K most likely tokens only (default 0: all)\n"
    "  --seed S             the same seed and options give the same tokens (default 1234)\n"
    "  --eos-id ID          stop once ID is generated (it is written)\n"
    "  --output text|ids    text (default with --prompt or --tokenizer) or ids (default with\n"
    "                       --prompt-ids alone); text is bytes, or the tokenizer's decoding\n";

struct GenerateArgs {
  std::string checkpoint;
  std::vector<int64_t> prompt;
  std::optional<tokenizer::Tokenizer> tokenizer;
  bool text_output = true;
  model::SamplingOptions sampling;
};

[[noreturn]] void usage_error(const std::string& message) {
  throw cli::UsageError("generate: " + message + " (see accel-host generate --help)");
}

template <typename T>
T parse_number(const std::string& option, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || ptr != end || text.empty()) usage_error(option + ": '" + text + "' is not a number");
  return value;
}

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find_first_of(" ,", pos);
    const std::string word = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!word.empty()) ids.push_back(parse_number<int64_t>("--prompt-ids", word));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return ids;
}

// nullopt for --help.
std::optional<GenerateArgs> parse(const std::vector<std::string>& args) {
  GenerateArgs parsed;
  std::optional<std::string> output, tokenizer_path, text;
  bool have_text = false, have_ids = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name == "--help" || name == "-h") return std::nullopt;
    if (name.empty() || name[0] != '-') {
      if (!parsed.checkpoint.empty()) usage_error("one CHECKPOINT_DIR, got '" + parsed.checkpoint + "' and '" + name + "'");
      parsed.checkpoint = name;
      continue;
    }
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else {
      if (i + 1 == args.size()) usage_error(name + " needs a value");
      value = args[++i];
    }
    model::SamplingOptions& s = parsed.sampling;
    if (name == "--prompt") {
      parsed.prompt.assign(value.begin(), value.end());
      for (int64_t& byte : parsed.prompt) byte = static_cast<unsigned char>(byte);
      text = value;
      have_text = true;
    } else if (name == "--tokenizer") {
      tokenizer_path = value;
    } else if (name == "--prompt-ids") {
      parsed.prompt = parse_ids(value);
      have_ids = true;
    } else if (name == "--max-new-tokens") {
      s.max_new_tokens = parse_number<int64_t>(name, value);
      if (s.max_new_tokens < 1) usage_error("--max-new-tokens must be >= 1");
    } else if (name == "--temperature") {
      s.temperature = parse_number<double>(name, value);
      if (!std::isfinite(s.temperature) || s.temperature < 0) usage_error("--temperature must be a finite number >= 0");
    } else if (name == "--top-k") {
      s.top_k = parse_number<int64_t>(name, value);
      if (s.top_k < 0) usage_error("--top-k must be >= 0 (0: every token)");
    } else if (name == "--seed") {
      s.seed = parse_number<uint64_t>(name, value);
    } else if (name == "--eos-id") {
      s.stop_token = parse_number<int64_t>(name, value);
      if (s.stop_token < 0) usage_error("--eos-id must be >= 0");
    } else if (name == "--output") {
      if (value != "text" && value != "ids") usage_error("--output: '" + value + "' is not text or ids");
      output = value;
    } else {
      usage_error("unknown option '" + name + "'");
    }
  }
  if (parsed.checkpoint.empty()) usage_error("expected CHECKPOINT_DIR");
  if (have_text == have_ids) usage_error("give one of --prompt TEXT and --prompt-ids IDS");
  if (parsed.prompt.empty()) usage_error(have_text ? "--prompt is empty" : "--prompt-ids holds no id");
  if (tokenizer_path) {
    try {
      parsed.tokenizer = tokenizer::Tokenizer::from_file(*tokenizer_path);
      if (text) parsed.prompt = parsed.tokenizer->encode(*text, true);
    } catch (const std::invalid_argument& e) {
      usage_error(std::string(text && parsed.tokenizer ? "--prompt: " : "--tokenizer: ") + e.what());
    }
    if (parsed.prompt.empty()) usage_error("--prompt encodes to no token");
  }
  parsed.text_output = output ? *output == "text" : have_text || tokenizer_path;
  return parsed;
}

void write_continuation(const std::vector<int64_t>& tokens, bool text, const tokenizer::Tokenizer* tokenizer) {
  if (text && tokenizer) {
    const std::string out = tokenizer->decode(tokens, false);  // special tokens written, as transformers decodes
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::string out;
  int64_t beyond_bytes = 0;
  for (int64_t id : tokens) {
    if (!text) {
      out += (out.empty() ? "" : " ") + std::to_string(id);
    } else if (id < 256) {
      out.push_back(static_cast<char>(id));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD: not a byte
      ++beyond_bytes;
    }
  }
  if (!text) out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  if (beyond_bytes > 0) {
    log::warn(strformat("%lld generated id(s) are not bytes (written as U+FFFD): a token-trained model wants "
                        "--output ids",
                        static_cast<long long>(beyond_bytes)));
  }
}

}  // namespace

int generate_command(const std::vector<std::string>& args, const comm::MpiSession& mpi) {
  log::init(mpi.rank(), log::Level::info);
  const std::optional<GenerateArgs> parsed = parse(args);
  if (!parsed) {
    if (mpi.rank() == 0) std::fputs(kUsage, stdout);
    return 0;
  }
  if (mpi.world_size() > 1) {
    throw cli::UsageError(
        strformat("generate runs as one process, not on %d ranks (run it without mpirun)", mpi.world_size()));
  }
  const std::filesystem::path checkpoint = resolve_checkpoint(parsed->checkpoint, kCommand);
  const model::GptConfig shape = checkpoint::read_trainer_state(checkpoint).model;
  if (parsed->tokenizer && parsed->tokenizer->vocab_size() > shape.vocab_size) {
    usage_error(strformat("--tokenizer: its ids reach %lld, beyond %s's vocabulary of %lld (not this model's tokenizer?)",
                          static_cast<long long>(parsed->tokenizer->vocab_size() - 1), checkpoint.string().c_str(),
                          static_cast<long long>(shape.vocab_size)));
  }
  const NamedTensors tensors = read_whole_model(checkpoint, kCommand);
  auto weights = std::make_shared<model::NamedWeights>(tensors.begin(), tensors.end());
  model::GptModel model(shape);
  try {
    model.set_initial_weights(std::move(weights));
    model.initialise(0);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("generate: " + checkpoint.string() + ": " + e.what());
  }
  model.release_initial_weights();
  std::vector<int64_t> continuation;
  const auto start = std::chrono::steady_clock::now();
  try {
    continuation = model::sample_continuation(model, parsed->prompt, parsed->sampling);
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_continuation(continuation, parsed->text_output, parsed->tokenizer ? &*parsed->tokenizer : nullptr);
  log::info(strformat("generated %zu tokens after a %zu-token prompt in %.3f s (%s)", continuation.size(),
                      parsed->prompt.size(), seconds, shape.describe().c_str()));
  return 0;
}

}  // namespace accel::app
