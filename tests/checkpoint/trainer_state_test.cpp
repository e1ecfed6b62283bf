// trainer_state.json is validated field by field: every field of a real
// file is mutated to a wrong type or an out-of-range value, and each must be
// refused with one line naming the file and the field (a step of -1 looped
// forever, a negative optimizer_steps gave NaN, 2.5 was read as 2, a loss
// scale <= 0 and unknown RNG kinds or plugin names were accepted). Also: the
// written text parses back to the same state, optional fields default, and
// a FIFO or symlink in place of the file is refused without blocking.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "host/checkpoint/trainer_state.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

TrainerState sample_state() {
  TrainerState s;
  s.step = 12;
  s.optimizer_steps = 10;
  s.data_position = 96;
  s.data_seed = 0xFFFFFFFFFFFFFFF0ull;  // beyond int64: must stay unsigned
  s.loss_scale = 512;
  s.loss_scale_growth_tracker = 3;
  s.model = {2, 4, 64, 32, 256};
  s.plugins = "ddp,recorder";
  s.world_size = 4;
  return s;
}

json sample_json() { return json::parse(trainer_state_json(sample_state())); }

// The error for `j`, or "" when it parses.
std::string error_of(const json& j) {
  try {
    parse_trainer_state(j.dump(), "ckpt/trainer_state.json");
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainerState, WrittenTextParsesBackExactly) {
  const TrainerState s = parse_trainer_state(trainer_state_json(sample_state()), "x");
  const TrainerState e = sample_state();
  EXPECT_EQ(s.step, e.step);
  EXPECT_EQ(s.optimizer_steps, e.optimizer_steps);
  EXPECT_EQ(s.data_position, e.data_position);
  EXPECT_EQ(s.data_seed, e.data_seed);
  EXPECT_EQ(s.loss_scale, e.loss_scale);
  EXPECT_EQ(s.loss_scale_growth_tracker, e.loss_scale_growth_tracker);
  EXPECT_EQ(s.model, e.model);
  EXPECT_EQ(s.plugins, e.plugins);
  EXPECT_EQ(s.world_size, e.world_size);
}

TEST(TrainerState, ALlamaShapeParsesBackAndItsFieldsAreChecked) {
  TrainerState llama = sample_state();
  llama.model = model::GptConfig{2, 4, 64, 32, 256, model::ModelFamily::llama, 2, 176, 500000.0, 1e-6};
  EXPECT_EQ(parse_trainer_state(trainer_state_json(llama), "x").model, llama.model);
  json j = json::parse(trainer_state_json(llama));
  j["model"]["n_kv_head"] = 3;  // 4 heads over 3 key/value heads
  EXPECT_NE(error_of(j).find("\"model.n_kv_head\" must divide n_head"), std::string::npos) << error_of(j);
  j["model"]["n_kv_head"] = 2;
  j["model"]["rope_theta"] = 0;
  EXPECT_NE(error_of(j).find("\"model.rope_theta\" must be a finite number > 0"), std::string::npos) << error_of(j);
  j["model"].erase("rope_theta");
  EXPECT_NE(error_of(j).find("rope_theta"), std::string::npos) << error_of(j);
}

// Qwen2's attention biases: written only when present, so files from before
// them (and every Llama) read as bias-free.
TEST(TrainerState, Qwen2AttentionBiasesParseBack) {
  TrainerState qwen2 = sample_state();
  qwen2.model = model::GptConfig{2, 4, 64, 32, 256, model::ModelFamily::llama, 2, 176, 1e4, 1e-6};
  qwen2.model.qkv_bias = true;
  EXPECT_EQ(parse_trainer_state(trainer_state_json(qwen2), "x").model, qwen2.model);
  json j = json::parse(trainer_state_json(qwen2));
  j["model"]["qkv_bias"] = 1;
  EXPECT_NE(error_of(j).find("qkv_bias"), std::string::npos) << error_of(j);
  j["model"].erase("qkv_bias");
  EXPECT_FALSE(parse_trainer_state(j.dump(), "x").model.qkv_bias);
  TrainerState llama = qwen2;
  llama.model.qkv_bias = false;
  EXPECT_FALSE(json::parse(trainer_state_json(llama))["model"].contains("qkv_bias"));
}

// The decoder's other choices (issue 51): each written only when it is not
// Llama's default, so the presets' files are what they were, and each read
// back exactly; on a GPT-2 each is refused by name.
TEST(TrainerState, TheDecodersChoicesParseBackAndDefaultsAreNotWritten) {
  TrainerState llama = sample_state();
  llama.model = model::GptConfig{2, 4, 64, 32, 256, model::ModelFamily::llama, 2, 176, 5e5, 1e-5};
  const json plain = json::parse(trainer_state_json(llama))["model"];
  for (const char* key : {"head_dim", "tie_embeddings", "qk_norm", "sliding_window", "rope_scaling"}) {
    EXPECT_FALSE(plain.contains(key)) << key;
  }
  TrainerState chosen = llama;
  chosen.model.head_dim = 24;
  chosen.model.tie_embeddings = true;
  chosen.model.qk_norm = true;
  chosen.model.sliding_window = 8;
  chosen.model.rope_scaling = RopeScaling{RopeScaling::Kind::llama3, 32.0, 1.0, 4.0, 8192};
  EXPECT_EQ(parse_trainer_state(trainer_state_json(chosen), "x").model, chosen.model);
  json j = json::parse(trainer_state_json(chosen));
  j["model"]["rope_scaling"]["rope_type"] = "su";
  EXPECT_NE(error_of(j).find("rope_type"), std::string::npos) << error_of(j);
  j = json::parse(trainer_state_json(chosen));
  j["model"]["head_dim"] = 23;
  EXPECT_NE(error_of(j).find("head_dim"), std::string::npos) << error_of(j);
  j = json::parse(trainer_state_json(sample_state()));
  j["model"]["qk_norm"] = true;
  EXPECT_NE(error_of(j).find("qk_norm"), std::string::npos) << error_of(j);
}

// Gemma's and OLMo 2's block choices: one "block" object, absent for
// Llama's defaults, each choice read back exactly; a GPT-2 refuses it.
TEST(TrainerState, TheBlocksChoicesParseBackAndDefaultsAreNotWritten) {
  TrainerState llama = sample_state();
  llama.model = model::GptConfig{2, 4, 64, 32, 256, model::ModelFamily::llama, 2, 176, 5e5, 1e-5};
  EXPECT_FALSE(json::parse(trainer_state_json(llama))["model"].contains("block"));
  TrainerState gemma = llama;
  BlockChoices& b = gemma.model.block;
  b.norm_placement = BlockChoices::NormPlacement::sandwich;
  b.norm_plus_one = true;
  b.mlp_activation = BlockChoices::MlpActivation::gelu_tanh;
  b.scale_embeddings = true;
  b.query_pre_attn_scalar = 24;
  b.attn_logit_softcap = 50;
  b.final_logit_softcap = 30;
  b.sliding_layers = {true, false};
  b.rope_local_theta = 1e4;
  gemma.model.sliding_window = 8;
  EXPECT_EQ(parse_trainer_state(trainer_state_json(gemma), "x").model, gemma.model);
  gemma.model.rope_scaling = RopeScaling{RopeScaling::Kind::linear, 8.0};
  EXPECT_EQ(parse_trainer_state(trainer_state_json(gemma), "x").model, gemma.model);
  TrainerState olmo = llama;
  olmo.model.block.norm_placement = BlockChoices::NormPlacement::post;
  olmo.model.block.qk_norm_whole = true;
  EXPECT_EQ(parse_trainer_state(trainer_state_json(olmo), "x").model, olmo.model);
  EXPECT_EQ(json::parse(trainer_state_json(olmo))["model"]["block"].size(), 2u);
  json j = json::parse(trainer_state_json(gemma));
  j["model"]["block"]["norm_placement"] = "middle";
  EXPECT_NE(error_of(j).find("norm_placement"), std::string::npos) << error_of(j);
  j = json::parse(trainer_state_json(gemma));
  j["model"]["block"]["sliding_layers"] = {true};
  EXPECT_NE(error_of(j).find("sliding_layers"), std::string::npos) << error_of(j);
  j = json::parse(trainer_state_json(gemma));
  j["model"]["block"]["attn_logit_softcap"] = -1;
  EXPECT_NE(error_of(j).find("attn_logit_softcap"), std::string::npos) << error_of(j);
  j = json::parse(trainer_state_json(sample_state()));
  j["model"]["block"] = json::object();
  EXPECT_NE(error_of(j).find("block"), std::string::npos) << error_of(j);
}

// Issue 51's rope types, partial rotary, layers without rotary and
// Granite's scalars: absent at their defaults, read back exactly.
TEST(TrainerState, RopeTypesAndTheNewFieldsParseBackAndDefaultsAreNotWritten) {
  TrainerState llama = sample_state();
  llama.model = model::GptConfig{4, 4, 64, 32, 256, model::ModelFamily::llama, 2, 176, 5e5, 1e-5};
  const json plain = json::parse(trainer_state_json(llama))["model"];
  for (const char* key : {"partial_rotary_factor", "nope_layers", "embedding_multiplier", "residual_multiplier",
                          "logits_scaling", "attention_multiplier"}) {
    EXPECT_FALSE(plain.contains(key)) << key;
  }
  std::vector<RopeScaling> ropes(4);
  ropes[0].kind = RopeScaling::Kind::linear;
  ropes[0].factor = 4.0;
  ropes[1].kind = RopeScaling::Kind::dynamic;
  ropes[1].factor = 2.0;
  ropes[1].original_max_position = 16;
  ropes[2].kind = RopeScaling::Kind::yarn;
  ropes[2].factor = 4.0;
  ropes[2].original_max_position = 16;
  ropes[2].beta_fast = 8.0;
  ropes[2].mscale = 0.5;
  ropes[2].mscale_all_dim = 1.0;
  ropes[2].truncate = false;
  ropes[3].kind = RopeScaling::Kind::longrope;
  ropes[3].factor = 2.0;
  ropes[3].original_max_position = 16;
  ropes[3].attention_factor = 1.5;
  ropes[3].short_factor = {1.0, 1.5, 2.0, 2.5, 3.0, 3.5};
  ropes[3].long_factor = {2.0, 3.0, 4.0, 5.0, 6.0, 7.0};
  for (const RopeScaling& rope : ropes) {
    TrainerState chosen = llama;
    chosen.model.rope_scaling = rope;
    chosen.model.partial_rotary_factor = 0.75;
    chosen.model.nope_layers = {1, 3};
    chosen.model.embedding_multiplier = 12.0;
    chosen.model.residual_multiplier = 0.22;
    chosen.model.logits_scaling = 8.0;
    chosen.model.attention_multiplier = 0.015625;
    EXPECT_EQ(parse_trainer_state(trainer_state_json(chosen), "x").model, chosen.model) << to_string(rope.kind);
  }
  TrainerState phi3 = llama;
  phi3.hf.model_type = "phi3";
  EXPECT_EQ(parse_trainer_state(trainer_state_json(phi3), "x").hf, phi3.hf);
  json j = json::parse(trainer_state_json(llama));
  j["model"]["nope_layers"] = {7};
  EXPECT_NE(error_of(j).find("nope_layers"), std::string::npos) << error_of(j);
}

TEST(TrainerState, AMixtureOfExpertsParsesBackAndAFileFromBeforeItIsDense) {
  TrainerState moe = sample_state();
  moe.model = model::GptConfig{2, 4, 64, 32, 256, model::ModelFamily::llama, 2, 96, 1e6, 1e-6, 8, 2};
  EXPECT_EQ(parse_trainer_state(trainer_state_json(moe), "x").model, moe.model);
  json j = json::parse(trainer_state_json(moe));
  j["model"]["experts_per_token"] = 9;  // more than the 8 experts
  EXPECT_NE(error_of(j).find("experts_per_token"), std::string::npos) << error_of(j);
  for (const char* key : {"n_experts", "experts_per_token"}) j["model"].erase(key);
  const model::GptConfig dense = parse_trainer_state(j.dump(), "x").model;
  EXPECT_EQ(dense.n_experts, 0);
  EXPECT_EQ(dense.experts_per_token, 0);
}

TEST(TrainerState, TheConfigKeysExportWritesParseBackAndAreChecked) {
  TrainerState moe = sample_state();
  moe.model = model::GptConfig{2, 4, 64, 32, 256, model::ModelFamily::llama, 2, 96, 1e6, 1e-6, 8, 2};
  moe.hf.router_aux_loss_coef = 0.02;
  moe.hf.intermediate_size = 5632;
  EXPECT_EQ(parse_trainer_state(trainer_state_json(moe), "x").hf, moe.hf);
  moe.hf.intermediate_size.reset();
  EXPECT_EQ(parse_trainer_state(trainer_state_json(moe), "x").hf, moe.hf);
  EXPECT_FALSE(sample_json().contains("hf_config"));  // none known: no object
  EXPECT_EQ(parse_trainer_state(sample_json().dump(), "x").hf, HfConfigKeys{});
  json j = json::parse(trainer_state_json(moe));
  j["hf_config"]["router_aux_loss_coef"] = -1;
  EXPECT_NE(error_of(j).find("router_aux_loss_coef\" must be at least 0"), std::string::npos) << error_of(j);
  j = json::parse(trainer_state_json(moe));
  j["hf_config"]["intermediate_size"] = 0;
  EXPECT_NE(error_of(j).find("intermediate_size"), std::string::npos) << error_of(j);
  j = json::parse(trainer_state_json(moe));
  j["hf_config"]["num_experts"] = 8;
  EXPECT_NE(error_of(j).find("num_experts\" is not a known field"), std::string::npos) << error_of(j);
}

TEST(TrainerState, AFileFromBeforeTheLlamaFamilyIsGpt2) {
  json j = sample_json();
  for (const char* key : {"family", "n_kv_head", "ffn_size", "rope_theta", "norm_eps", "n_experts", "experts_per_token"}) {
    j["model"].erase(key);
  }
  EXPECT_EQ(parse_trainer_state(j.dump(), "x").model, sample_state().model);
}

TEST(TrainerState, OptionalFieldsDefault) {
  json j = sample_json();
  j.erase("plugins");
  j.erase("world_size");
  const TrainerState s = parse_trainer_state(j.dump(), "x");
  EXPECT_EQ(s.plugins, "");
  EXPECT_EQ(s.world_size, 1);
  j["plugins"] = "";
  EXPECT_EQ(error_of(j), "");
}

struct BadField {
  const char* pointer;  // JSON pointer of the field
  json value;           // the bad value
  const char* expected; // fragment of the one-line error
};

TEST(TrainerState, EveryFieldIsTypeAndRangeChecked) {
  const BadField cases[] = {
      {"/format_version", 2, "\"format_version\" 2 is not supported"},
      {"/format_version", 1.0, "\"format_version\" must be an integer, got 1.0"},
      {"/step", -1, "\"step\" must be at least 0, got -1"},
      {"/step", 2.5, "\"step\" must be an integer, got 2.5"},
      {"/step", "12", "\"step\" must be an integer, got \"12\""},
      {"/step", 18446744073709551615ull, "\"step\" must be at most 9223372036854775807"},
      {"/optimizer_steps", -3, "\"optimizer_steps\" must be at least 0, got -3"},
      {"/optimizer_steps", 13, "\"optimizer_steps\" must be at most 12, got 13"},
      {"/optimizer_steps", 2.5, "\"optimizer_steps\" must be an integer, got 2.5"},
      {"/data_position", -8, "\"data_position\" must be at least 0, got -8"},
      {"/data_position", nullptr, "\"data_position\" must be an integer, got null"},
      {"/rng", 7, "\"rng\" must be a JSON object"},
      {"/rng/kind", "mt19937", "\"rng.kind\" must be \"counter\", got \"mt19937\""},
      {"/rng/kind", 1, "\"rng.kind\" must be a string, got 1"},
      {"/rng/data_seed", -1, "\"rng.data_seed\" must be an integer >= 0, got -1"},
      {"/rng/data_seed", 1.5, "\"rng.data_seed\" must be an integer >= 0, got 1.5"},
      {"/loss_scaler/scale", 0, "\"loss_scaler.scale\" must be a finite number > 0, got 0"},
      {"/loss_scaler/scale", -2.0, "\"loss_scaler.scale\" must be a finite number > 0, got -2.0"},
      {"/loss_scaler/scale", "inf", "\"loss_scaler.scale\" must be a number, got \"inf\""},
      // JSON has no inf: written, it reads back as null.
      {"/loss_scaler/scale", std::numeric_limits<double>::infinity(), "\"loss_scaler.scale\" must be a number, got null"},
      {"/loss_scaler/growth_tracker", -1, "\"loss_scaler.growth_tracker\" must be at least 0, got -1"},
      {"/model/n_layer", 0, "\"model.n_layer\" must be at least 1, got 0"},
      {"/model/n_head", -4, "\"model.n_head\" must be at least 1, got -4"},
      {"/model/n_embd", 64.5, "\"model.n_embd\" must be an integer, got 64.5"},
      {"/model/seq_len", int64_t{1} << 40, "\"model.seq_len\" must be at most 4294967296"},
      {"/model/vocab_size", "256", "\"model.vocab_size\" must be an integer"},
      {"/plugins", "ddp,Evil", "\"plugins\" must be distinct comma-separated plugin names"},
      {"/plugins", "ddp,,fsdp", "\"plugins\" must be distinct comma-separated plugin names"},
      {"/plugins", "ddp,ddp", "\"plugins\" must be distinct comma-separated plugin names"},
      {"/plugins", "../libevil", "\"plugins\" must be distinct comma-separated plugin names"},
      {"/plugins", 3, "\"plugins\" must be a string, got 3"},
      {"/world_size", 0, "\"world_size\" must be at least 1, got 0"},
      {"/world_size", 4294967297ll, "\"world_size\" must be at most 16777216"},
      {"/world_size", 2.5, "\"world_size\" must be an integer, got 2.5"},
      {"/surprise", true, "\"surprise\" is not a known field"},
      {"/rng/surprise", true, "\"rng.surprise\" is not a known field"},
      {"/model/surprise", 2, "\"model.surprise\" is not a known field"},
      {"/model/family", "mamba", "\"model.family\" must be \"gpt2\" or \"llama\", got \"mamba\""},
      {"/model/n_kv_head", 2, "\"model.n_kv_head\" must be at most 0, got 2"},  // GPT-2 has none
      {"/model/norm_eps", -1.0, "\"model.norm_eps\" must be a finite number > 0"},
  };
  for (const BadField& c : cases) {
    json j = sample_json();
    j[json::json_pointer(c.pointer)] = c.value;
    const std::string e = error_of(j);
    EXPECT_EQ(e.rfind("'ckpt/trainer_state.json': ", 0), 0u) << c.pointer << ": " << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.pointer << " = " << c.value.dump() << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(TrainerState, MissingFieldsAndNonObjectsAreNamed) {
  for (const char* pointer : {"/step", "/optimizer_steps", "/data_position", "/rng", "/rng/kind", "/rng/data_seed",
                              "/loss_scaler", "/loss_scaler/scale", "/model", "/model/vocab_size"}) {
    json j = sample_json();
    const json::json_pointer p(pointer);
    j[p.parent_pointer()].erase(p.back());
    std::string field = std::string(pointer).substr(1);
    std::replace(field.begin(), field.end(), '/', '.');
    EXPECT_NE(error_of(j).find("\"" + field + "\" is missing"), std::string::npos) << error_of(j);
  }
  EXPECT_NE(error_of(json::array()).find("the document must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(json(3)).find("the document must be a JSON object"), std::string::npos);
  try {
    parse_trainer_state("{\"step\": ", "f");
    ADD_FAILURE() << "truncated JSON accepted";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("'f': not valid JSON", 0), 0u) << e.what();
  }
}

// The one JSON rule (accel/sdk/json_input.hpp): a document nested 300,000
// deep is refused while it is parsed (a recursive walk or dump() of it
// overflows the stack), and a huge wrong-typed value is quoted bounded.
TEST(TrainerState, ADeepDocumentAndAHugeValueGiveOneBoundedLine) {
  std::string text = sample_json().dump();
  text.insert(1, "\"step\": " + std::string(300000, '[') + std::string(300000, ']') + ", ");
  std::string e;
  try {
    parse_trainer_state(text, "ckpt/trainer_state.json");
  } catch (const CheckpointError& error) {
    e = error.what();
  }
  EXPECT_EQ(e, "'ckpt/trainer_state.json': nests arrays or objects deeper than 64 levels");
  for (const json& huge : {json(std::string(1 << 20, 'x')), json(std::vector<int>(1 << 20, 7))}) {
    for (const char* pointer : {"/step", "/plugins", "/rng/kind", "/model/family"}) {
      json j = sample_json();
      j[json::json_pointer(pointer)] = huge;
      e = error_of(j);
      EXPECT_NE(e, "") << pointer;
      EXPECT_LT(e.size(), 300u) << pointer << ": " << e.substr(0, 300);
      EXPECT_EQ(e.find('\n'), std::string::npos) << pointer;
    }
  }
  json j = sample_json();
  j[std::string(1 << 20, 'k') + "\n"] = 1;  // an unknown key is named, cut and escaped
  e = error_of(j);
  EXPECT_NE(e.find("is not a known field"), std::string::npos) << e.substr(0, 300);
  EXPECT_LT(e.size(), 300u);
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

class TrainerStateFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("accel_trainer_state_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TrainerStateFile, ARegularFileIsRead) {
  std::ofstream(dir_ / kTrainerStateFile) << trainer_state_json(sample_state());
  EXPECT_EQ(read_trainer_state(dir_).step, 12);
}

TEST_F(TrainerStateFile, SymlinkOrFifoIsRefusedWithoutBlocking) {
  std::ofstream(dir_ / "real.json") << trainer_state_json(sample_state());
  fs::create_symlink(dir_ / "real.json", dir_ / kTrainerStateFile);
  EXPECT_THROW(read_trainer_state(dir_), CheckpointError);
  fs::remove(dir_ / kTrainerStateFile);
  ASSERT_EQ(::mkfifo((dir_ / kTrainerStateFile).c_str(), 0600), 0);
  auto read = std::async(std::launch::async, [&]() -> std::string {
    try {
      read_trainer_state(dir_);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  });
  if (read.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int fd = ::open((dir_ / kTrainerStateFile).c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "read_trainer_state blocked on a FIFO";
  }
  EXPECT_NE(read.get().find("is a FIFO, not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace accel::checkpoint
