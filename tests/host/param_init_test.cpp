// --init-from's starting weights (host/model/param_init.h, GptModel::
// set_initial_weights): every unit and every slice of a parameter takes the
// loaded values, a bad weight set is refused by name, and released weights
// are never silently replaced by seeded ones.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "host/model/gpt.h"

using namespace accel::model;

namespace {

GptConfig tiny() { return GptConfig{2, 2, 16, 8, 32}; }

// Every parameter of `config`, filled with values no seed produces.
std::shared_ptr<NamedWeights> loaded_weights(const GptConfig& config) {
  auto weights = std::make_shared<NamedWeights>();
  const GptModel layout(config, at::kCPU, /*allocate=*/false);
  int64_t k = 0;
  for (const Unit& unit : layout.units()) {
    for (const Param& p : unit.params()) {
      (*weights)[p.spec.name] = at::arange(p.spec.numel(), at::kFloat).add(static_cast<double>(k++)).view(p.spec.shape);
    }
  }
  return weights;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ParamInit, EveryUnitStartsFromTheLoadedWeights) {
  const auto weights = loaded_weights(tiny());
  GptModel model(tiny());
  model.set_initial_weights(weights);
  model.initialise(5);
  for (const Unit& unit : model.units()) {
    for (const Param& p : unit.params()) EXPECT_TRUE(at::equal(p.value, weights->at(p.spec.name))) << p.spec.name;
  }
}

TEST(ParamInit, ASliceIsTheSameSliceOfTheWhole) {
  // How a sharding plugin's init_range fills only its shard.
  const auto weights = loaded_weights(tiny());
  const ParamInit init(5, weights);
  const GptModel layout(tiny(), at::kCPU, false);
  const ParamSpec& spec = layout.units()[1].params()[2].spec;  // a block's attention weight
  std::vector<float> slice(37);
  init.fill(spec, 11, 37, slice.data());
  const at::Tensor whole = weights->at(spec.name).flatten();
  for (int64_t i = 0; i < 37; ++i) EXPECT_EQ(slice[i], whole[11 + i].item<float>());
  EXPECT_THROW(init.fill(spec, spec.numel() - 3, 4, slice.data()), std::logic_error);
}

TEST(ParamInit, UnitsMaterialisedLaterTakeTheLoadedWeightsToo) {
  const auto weights = loaded_weights(tiny());
  GptModel model(tiny(), at::kCPU, /*allocate=*/false);
  model.set_initial_weights(weights);
  model.initialise(5);
  Unit& block = model.units()[1];
  block.materialize_params(at::kFloat, Unit::Fill::from_seed, model.param_init());
  for (const Param& p : block.params()) EXPECT_TRUE(at::equal(p.value, weights->at(p.spec.name))) << p.spec.name;
}

TEST(ParamInit, ReleasedWeightsAreRefusedNotReplacedBySeededOnes) {
  GptModel model(tiny(), at::kCPU, false);
  model.set_initial_weights(loaded_weights(tiny()));
  model.initialise(5);
  model.release_initial_weights();
  Unit& block = model.units()[1];
  EXPECT_NE(message_of([&] { block.materialize_params(at::kFloat, Unit::Fill::from_seed, model.param_init()); })
                .find("already released"),
            std::string::npos);
}

TEST(ParamInit, WithoutLoadedWeightsTheSeedDecides) {
  GptModel a(tiny()), b(tiny());
  a.initialise(5);
  b.initialise(5);
  a.release_initial_weights();  // nothing loaded: nothing to release, seeds still serve
  Unit& block = a.units()[1];
  block.release_params();
  block.materialize_params(at::kFloat, Unit::Fill::from_seed, a.param_init());
  EXPECT_TRUE(at::equal(block.flat_params(), b.units()[1].flat_params()));
}

TEST(ParamInit, ABadWeightSetIsRefusedByName) {
  GptModel model(tiny());
  auto missing = loaded_weights(tiny());
  missing->erase("h.1.mlp.c_fc.weight");
  EXPECT_NE(message_of([&] { model.set_initial_weights(missing); }).find("h.1.mlp.c_fc.weight"), std::string::npos);

  auto misshapen = loaded_weights(tiny());
  (*misshapen)["wpe.weight"] = at::zeros({7, 16});
  const std::string shape_error = message_of([&] { model.set_initial_weights(misshapen); });
  EXPECT_NE(shape_error.find("wpe.weight"), std::string::npos);
  EXPECT_NE(shape_error.find("[8, 16]"), std::string::npos) << shape_error;

  auto extra = loaded_weights(tiny());
  (*extra)["h.7.attn.c_attn.weight"] = at::zeros({1});
  EXPECT_NE(message_of([&] { model.set_initial_weights(extra); }).find("h.7.attn.c_attn.weight"), std::string::npos);

  auto half = loaded_weights(tiny());
  (*half)["ln_f.weight"] = (*half)["ln_f.weight"].to(at::kHalf);
  EXPECT_NE(message_of([&] { model.set_initial_weights(half); }).find("ln_f.weight"), std::string::npos);
}
