// The GPT model: presets, unit composition, causality, initial loss.
#include <gtest/gtest.h>

#include <cmath>

#include "host/cli/model_presets.h"
#include "host/model/block_parts.h"
#include "host/model/gpt.h"
#include "host/model/sampling.h"

using namespace accel::model;

namespace {

TEST(GptConfig, PresetsAndOverrides) {
  EXPECT_EQ(count_parameters(make_gpt_config("gpt-small", {})), 124439808);  // GPT-2 small
  accel::ModelOverrides o;
  o.n_layer = 3;
  EXPECT_EQ(make_gpt_config("gpt-tiny", o).n_layer, 3);
  o.n_head = 5;  // 64 is not a multiple of 5
  EXPECT_THROW(make_gpt_config("gpt-tiny", o), std::invalid_argument);
  EXPECT_THROW(make_gpt_config("gpt-huge", {}), std::invalid_argument);
}

// count_parameters (and the memory bound built like it) follows every
// block choice: Gemma's four norms a block, OLMo 2's whole-projection q/k
// norms, Qwen3's per-head ones.
TEST(GptConfig, EveryPresetCountsItsParameters) {
  for (const char* preset : accel::kModelPresets) {
    const GptConfig config = make_gpt_config(preset, {});
    EXPECT_EQ(GptModel(config, at::kCPU, /*allocate=*/false).num_parameters(), count_parameters(config)) << preset;
  }
}

// Gemma's and OLMo 2's blocks decode as their whole forward: the windows of
// the sliding layers only, the capped attention, the local rotary base.
TEST(Llama, TheFamiliesBlocksDecodeAsTheirWholeForward) {
  for (const char* preset : {"gemma2-tiny", "gemma3-tiny", "olmo2-tiny"}) {
    accel::ModelOverrides o;
    o.seq_len = 24;
    GptConfig config = make_gpt_config(preset, o);
    if (config.sliding_window > 0) config.sliding_window = 5;  // shorter than the chunks below
    GptModel model(config);
    model.initialise(3);
    at::NoGradGuard no_grad;
    const at::Tensor tokens = at::randint(0, config.vocab_size, {2, 24}, at::kLong);
    const at::Tensor whole = model.forward(tokens);
    GptModel::KvCache cache;
    std::vector<at::Tensor> parts;
    for (const auto& [start, length] : {std::pair{0, 9}, std::pair{9, 7}, std::pair{16, 1}, std::pair{17, 7}}) {
      parts.push_back(model.forward_cached(tokens.narrow(1, start, length), cache));
    }
    EXPECT_TRUE(at::allclose(at::cat(parts, 0), whole, 1e-5, 1e-5)) << preset;
  }
}

TEST(Gpt, CachedDecodingGivesTheWholeForwardsLogits) {
  GptModel model(GptConfig{3, 2, 16, 12, 40});
  model.initialise(5);
  at::NoGradGuard no_grad;
  const at::Tensor tokens = at::randint(0, 40, {2, 12}, at::kLong);
  const at::Tensor whole = model.forward(tokens);  // [12, 2, 40]
  // A 5-token prefill, a 3-token chunk (an explicit bottom-right mask), then
  // one position at a time (no mask): each chunk's logits are the rows of
  // the whole forward at its positions.
  GptModel::KvCache cache;
  int64_t at = 0;
  for (int64_t chunk : {5, 3, 1, 1, 1, 1}) {
    const at::Tensor logits = model.forward_cached(tokens.narrow(1, at, chunk), cache);
    EXPECT_TRUE(at::allclose(logits, whole.narrow(0, at, chunk), 1e-5, 1e-6)) << "positions " << at << "+" << chunk;
    at += chunk;
  }
  EXPECT_EQ(cache.length, 12);
  EXPECT_THROW(model.forward_cached(tokens.narrow(1, 0, 1), cache), std::invalid_argument);  // past seq_len
}

GptConfig tiny_llama() { return make_gpt_config("llama-tiny", {}); }

// A CUDA rank's head pads the vocabulary rows for the GEMM: the same logits
// and the same weight and input gradients as the unpadded product.
TEST(Gpt, ThePaddedVocabularyProjectionGivesTheSameValuesAndGradients) {
  at::manual_seed(9);
  const at::Tensor x0 = at::randn({3, 2, 16}), w0 = at::randn({37, 16});  // 37 rows: padded to 64
  at::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  at::Tensor px = x0.clone().requires_grad_(), pw = w0.clone().requires_grad_();
  const at::Tensor upstream = at::randn({3, 2, 37});
  const at::Tensor plain = at::linear(x, w), padded = accel::model::padded_linear(px, pw, 64);
  ASSERT_EQ(padded.sizes(), plain.sizes());
  EXPECT_TRUE(at::allclose(padded, plain, 1e-6, 1e-6));
  (plain * upstream).sum().backward();
  (padded * upstream).sum().backward();
  EXPECT_TRUE(at::allclose(pw.grad(), w.grad(), 1e-6, 1e-6));
  EXPECT_TRUE(at::allclose(px.grad(), x.grad(), 1e-6, 1e-6));
  EXPECT_EQ(pw.grad().sizes(), w0.sizes());
}

TEST(Llama, PresetsCountTheirParametersAndRefuseGpt2Only) {
  EXPECT_EQ(count_parameters(make_gpt_config("llama-small", {})), 99'496'704);  // the "~100M" preset
  GptModel model(tiny_llama());
  EXPECT_EQ(model.num_parameters(), count_parameters(tiny_llama()));
  EXPECT_FALSE(model.head_tied_to_embedding());
  accel::ModelOverrides o;
  o.n_kv_head = 3;  // 4 heads are not a multiple of 3
  EXPECT_THROW(make_gpt_config("llama-tiny", o), std::invalid_argument);
  EXPECT_THROW(make_gpt_config("gpt-tiny", o), std::invalid_argument);  // GPT-2 has no key/value heads
  o = {};
  o.n_head = 8;  // a new head count alone keeps multi-head attention
  EXPECT_EQ(make_gpt_config("llama-tiny", o).n_kv_head, 8);
}

// Issue 50 (19): `--model moe-tiny --n-experts 1` was refused naming
// --experts-per-token, which the user had not given.
TEST(Llama, ExpertCountRefusalsNameTheFlagTheUserGave) {
  const auto refusal = [](const accel::ModelOverrides& o) {
    try {
      make_gpt_config("moe-tiny", o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  accel::ModelOverrides o;
  o.n_experts = 1;  // moe-tiny's tokens each take 2
  EXPECT_EQ(refusal(o),
            "--n-experts 1 is fewer than the 2 experts each token takes in moe-tiny: give --experts-per-token too (1 "
            "to 1)");
  o.experts_per_token = 1;
  EXPECT_EQ(make_gpt_config("moe-tiny", o).experts_per_token, 1);
  o.experts_per_token = 3;
  EXPECT_EQ(refusal(o), "--experts-per-token 3 must lie in [1, --n-experts 1]");
  o.n_experts.reset();
  o.experts_per_token = 5;  // moe-tiny has 4
  EXPECT_EQ(refusal(o), "--experts-per-token 5 must lie in [1, 4] (moe-tiny's experts)");
}

TEST(Llama, AttentionIsCausalAndCachedDecodingMatchesTheWholeForward) {
  accel::ModelOverrides o;
  o.seq_len = 10;
  GptModel model(make_gpt_config("llama-tiny", o));
  model.initialise(3);
  at::NoGradGuard no_grad;
  at::Tensor tokens = at::randint(0, 256, {2, 10}, at::kLong);
  const at::Tensor whole = model.forward(tokens);
  EXPECT_EQ(whole.sizes(), (at::IntArrayRef{10, 2, 256}));
  at::Tensor changed = tokens.clone();
  changed.index_put_({at::indexing::Slice(), 7}, (tokens.index({at::indexing::Slice(), 7}) + 1) % 256);
  const at::Tensor after = model.forward(changed);
  EXPECT_TRUE(at::equal(after.narrow(0, 0, 7), whole.narrow(0, 0, 7)));  // earlier positions never see it
  EXPECT_FALSE(at::allclose(after.narrow(0, 7, 3), whole.narrow(0, 7, 3)));
  GptModel::KvCache cache;
  int64_t at = 0;
  for (int64_t chunk : {4, 3, 1, 1, 1}) {  // rotary angles follow the cache's offset
    EXPECT_TRUE(at::allclose(model.forward_cached(tokens.narrow(1, at, chunk), cache), whole.narrow(0, at, chunk),
                             1e-5, 1e-6))
        << "positions " << at << "+" << chunk;
    at += chunk;
  }
}

TEST(Sampling, GreedyIsTheArgmaxChainAndSeedsRepeat) {
  GptModel model(GptConfig{2, 2, 16, 16, 30});
  model.initialise(9);
  const std::vector<int64_t> prompt = {3, 1, 4};
  SamplingOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 8;
  const std::vector<int64_t> got = sample_continuation(model, prompt, greedy);
  // Without the cache: the argmax of the whole forward, one token at a time.
  std::vector<int64_t> sequence = prompt;
  {
    at::NoGradGuard no_grad;
    for (int i = 0; i < 8; ++i) {
      const at::Tensor logits = model.forward(at::tensor(sequence, at::kLong).unsqueeze(0));
      sequence.push_back(logits.select(0, logits.size(0) - 1).select(0, 0).argmax().item<int64_t>());
    }
  }
  EXPECT_EQ(got, std::vector<int64_t>(sequence.begin() + 3, sequence.end()));

  SamplingOptions sampled;
  sampled.max_new_tokens = 10;
  sampled.top_k = 1;  // top-1 sampling is greedy whatever the temperature
  const std::vector<int64_t> top_1 = sample_continuation(model, prompt, sampled);
  EXPECT_EQ(std::vector<int64_t>(top_1.begin(), top_1.begin() + 8), got);
  sampled.top_k = 0;
  sampled.temperature = 1.5;
  EXPECT_EQ(sample_continuation(model, prompt, sampled), sample_continuation(model, prompt, sampled));
  sampled.stop_token = sample_continuation(model, prompt, sampled).at(2);
  const std::vector<int64_t> stopped = sample_continuation(model, prompt, sampled);
  EXPECT_LE(stopped.size(), 3u);
  EXPECT_EQ(stopped.back(), sampled.stop_token);

  SamplingOptions too_long;
  too_long.max_new_tokens = 14;  // 3 + 14 > 16 positions
  EXPECT_THROW(sample_continuation(model, prompt, too_long), std::invalid_argument);
  EXPECT_THROW(sample_continuation(model, {}, greedy), std::invalid_argument);
  EXPECT_THROW(sample_continuation(model, {30}, greedy), std::invalid_argument);  // outside the vocabulary
}

TEST(Gpt, UnitByUnitEqualsWholeForward) {
  GptModel model(GptConfig{3, 2, 16, 8, 40});
  model.initialise(11);
  const at::Tensor tokens = at::randint(0, 40, {3, 8}, at::kLong);
  at::Tensor x = tokens;
  for (size_t i = 0; i < model.units().size(); ++i) x = model.forward_unit(i, x);
  EXPECT_TRUE(at::equal(x, model.forward(tokens)));
  EXPECT_EQ(x.sizes(), (at::IntArrayRef{8, 3, 40}));  // sequence-major logits [T, B, V]
}

TEST(Gpt, AttentionIsCausal) {
  GptModel model(GptConfig{2, 2, 16, 8, 40});
  model.initialise(5);
  at::Tensor a = at::randint(0, 40, {1, 8}, at::kLong);
  at::Tensor b = a.clone();
  b.index_put_({0, 7}, (a.index({0, 7}).item<int64_t>() + 1) % 40);  // change only the last token
  const at::Tensor la = model.forward(a), lb = model.forward(b);
  EXPECT_TRUE(at::allclose(la.narrow(0, 0, 7), lb.narrow(0, 0, 7)));  // logits are [T, B, V]
  EXPECT_FALSE(at::allclose(la.narrow(0, 7, 1), lb.narrow(0, 7, 1)));
}

TEST(Gpt, InitialLossIsNearUniform) {
  GptModel model(GptConfig{2, 4, 64, 32, 256});
  model.initialise(1);
  const at::Tensor tokens = at::randint(0, 256, {4, 32}, at::kLong);
  // Independent targets: with a tied head, the input token itself would score high.
  const at::Tensor targets = at::randint(0, 256, {4, 32}, at::kLong);
  const double loss = model.loss(tokens, targets).item<double>();
  EXPECT_NEAR(loss, std::log(256.0), 0.1);
}

TEST(Gpt, SameSeedSameWeights) {
  GptModel a(GptConfig{}), b(GptConfig{}), c(GptConfig{});
  a.initialise(9);
  b.initialise(9);
  c.initialise(10);
  for (size_t i = 0; i < a.units().size(); ++i) {
    EXPECT_TRUE(at::equal(a.units()[i].flat_params(), b.units()[i].flat_params()));
  }
  EXPECT_FALSE(at::equal(a.units()[1].flat_params(), c.units()[1].flat_params()));
}

// Every rank's slice of a split parameter, initialised on its own, equals
// its part of the whole tensor: QKV by heads (stride 3), a row-parallel
// weight by input columns, the vocabulary padded (zero rows).
TEST(Gpt, SplitSlicesAreTheWholeTensorsParts) {
  const GptConfig config{1, 4, 8, 4, 15};
  GptModel whole(config);
  whole.initialise(3);
  for (int64_t rank = 0; rank < 2; ++rank) {
    GptModel part(config, at::kCPU, /*allocate=*/false);
    for (Unit& unit : part.units()) {
      std::vector<ParamSplit> splits(unit.params().size());
      for (size_t i = 0; i < splits.size(); ++i) {
        const ParamSpec& spec = unit.params()[i].spec;
        const bool qkv = spec.name.find("c_attn") != std::string::npos;
        if (spec.name == "wte.weight") splits[i] = ParamSplit{0, 2, rank, 1, 16};
        if (qkv) splits[i] = ParamSplit{0, 2, rank, 3, 0};
        if (spec.name == "h.0.attn.c_proj.weight") splits[i] = ParamSplit{1, 2, rank, 1, 0};
      }
      unit.split_params(splits);
      unit.materialize_params(at::kFloat, Unit::Fill::from_seed, 3);
    }
    const auto value = [](const GptModel& m, size_t u, const char* name) { return m.units()[u].param(name).value; };
    const at::Tensor qkv = value(whole, 1, "h.0.attn.c_attn.weight");  // [24, 8]: Q, K, V blocks of 8 rows
    std::vector<at::Tensor> heads;
    for (int64_t k = 0; k < 3; ++k) heads.push_back(qkv.narrow(0, k * 8 + rank * 4, 4));
    EXPECT_TRUE(at::equal(value(part, 1, "h.0.attn.c_attn.weight"), at::cat(heads, 0)));
    EXPECT_TRUE(at::equal(value(part, 1, "h.0.attn.c_proj.weight"),
                          value(whole, 1, "h.0.attn.c_proj.weight").narrow(1, rank * 4, 4)));
    const at::Tensor wte = value(part, 0, "wte.weight");  // 15 rows padded to 16
    const int64_t real = rank == 0 ? 8 : 7;
    EXPECT_TRUE(at::equal(wte.narrow(0, 0, real), value(whole, 0, "wte.weight").narrow(0, rank * 8, real)));
    if (rank == 1) {
      EXPECT_TRUE(at::equal(wte[7], at::zeros({8})));
    }
    EXPECT_TRUE(at::equal(value(part, 1, "h.0.ln_1.weight"), value(whole, 1, "h.0.ln_1.weight")));
  }
}

TEST(Gpt, RejectsSequencesLongerThanTheModel) {
  GptModel model(GptConfig{1, 1, 8, 4, 16});
  EXPECT_THROW(model.forward(at::zeros({1, 5}, at::kLong)), std::invalid_argument);
}

}  // namespace
