// Units: parameters are views into one flat buffer, gradients land in the
// flat gradient buffer, decayed parameters come first.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "host/model/gpt.h"
#include "host/model/storage_pool.h"

using namespace accel::model;

namespace {

GptConfig tiny() { return GptConfig{2, 2, 16, 8, 32}; }

// Pages of [data, data + bytes) the kernel says are resident.
int resident_pages(void* data, size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  if (mincore(data, bytes, in_core.data()) != 0) return -1;
  int n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return n;
}

TEST(Unit, ParametersAreViewsIntoTheFlatBuffer) {
  GptModel model(tiny());
  for (Unit& unit : model.units()) {
    const float* base = unit.flat_params().data_ptr<float>();
    int64_t total = 0;
    for (const Param& p : unit.params()) {
      EXPECT_EQ(p.value.data_ptr<float>(), base + p.offset) << p.spec.name;
      EXPECT_TRUE(p.value.is_leaf());
      EXPECT_TRUE(p.value.requires_grad());
      total += p.spec.numel();
    }
    EXPECT_EQ(total, unit.numel());
  }
  EXPECT_EQ(model.num_parameters(), count_parameters(tiny()));
}

TEST(Unit, DecayedParametersComeFirst) {
  GptModel model(tiny());
  for (const Unit& unit : model.units()) {
    for (const Param& p : unit.params()) {
      const bool in_decay_range = p.offset + p.spec.numel() <= unit.decay_numel();
      EXPECT_EQ(in_decay_range, p.spec.decays()) << p.spec.name;
    }
  }
  EXPECT_EQ(model.units().back().decay_numel(), 0);  // ln_f only
}

TEST(Unit, BackwardAccumulatesIntoTheFlatGradientBuffer) {
  GptModel model(tiny());
  model.initialise(3);
  const at::Tensor tokens = at::randint(0, 32, {2, 8}, at::kLong);
  model.loss(tokens, tokens).backward();
  for (Unit& unit : model.units()) {
    EXPECT_GT(unit.flat_grads().abs().sum().item<double>(), 0.0) << unit.name();
    for (const Param& p : unit.params()) {
      EXPECT_EQ(p.value.grad().data_ptr<float>(), unit.flat_grads().data_ptr<float>() + p.offset);
    }
  }
  const at::Tensor first = model.units()[1].flat_grads().clone();
  model.loss(tokens, tokens).backward();  // accumulates: twice the gradient
  EXPECT_TRUE(at::allclose(model.units()[1].flat_grads(), 2 * first, 1e-5, 1e-7));
  model.zero_grads();
  EXPECT_EQ(model.units()[1].flat_grads().abs().sum().item<double>(), 0.0);
}

TEST(Unit, ParameterHintsFollowMegatronSplits) {
  GptModel model(tiny());
  const Unit& block = model.units()[1];
  EXPECT_EQ(block.param("h.0.attn.c_attn.weight").spec.hint, ParallelHint::column);
  EXPECT_EQ(block.param("h.0.attn.c_proj.weight").spec.hint, ParallelHint::row);
  EXPECT_EQ(block.param("h.0.ln_1.weight").spec.role, ParamRole::norm);
  EXPECT_EQ(model.units()[0].param("wte.weight").spec.hint, ParallelHint::vocab);
  EXPECT_THROW(block.param("nope"), std::out_of_range);
}

}  // namespace

namespace {

// A model whose units are all materialised and initialised from `seed`,
// and a twin built with deferred storage that materialises on demand.
at::Tensor loss_of(GptModel& model, const at::Tensor& tokens) { return model.loss(tokens, tokens); }

TEST(UnitStorage, DeferredUnitsHaveNoStorageUntilMaterialised) {
  GptModel model(tiny(), at::kCPU, /*allocate=*/false);
  for (const Unit& unit : model.units()) {
    EXPECT_FALSE(unit.has_params());
    EXPECT_FALSE(unit.has_grads());
    EXPECT_GT(unit.numel(), 0);
  }
  EXPECT_EQ(model.num_parameters(), count_parameters(tiny()));
  Unit& block = model.units()[1];
  block.materialize_params(at::kFloat, Unit::Fill::from_seed, 7);
  GptModel reference(tiny());
  reference.initialise(7);
  EXPECT_TRUE(at::equal(block.flat_params(), reference.units()[1].flat_params()));
  EXPECT_THROW(block.materialize_grads(at::kBFloat16, true), std::logic_error);  // dtype must match params
  block.release_params();
  EXPECT_FALSE(block.has_params());
  EXPECT_EQ(block.params()[0].value.numel(), 0);
}

// FSDP's pattern: parameters released after forward and gathered again
// (into a NEW buffer) before backward; gradients materialised only for
// backward. The result must equal keeping everything.
TEST(UnitStorage, ReleaseBetweenForwardAndBackwardGivesTheSameGradients) {
  const at::Tensor tokens = at::randint(0, 32, {2, 8}, at::kLong);
  GptModel kept(tiny());
  kept.initialise(3);
  loss_of(kept, tokens).backward();

  GptModel sharded(tiny(), at::kCPU, /*allocate=*/false);
  sharded.initialise(3);
  for (Unit& unit : sharded.units()) unit.materialize_params(at::kFloat, Unit::Fill::from_seed, 3);
  const at::Tensor loss = loss_of(sharded, tokens);
  for (Unit& unit : sharded.units()) unit.release_params();
  for (Unit& unit : sharded.units()) {
    unit.materialize_params(at::kFloat, Unit::Fill::from_seed, 3);  // "re-gathered"
    unit.materialize_grads(at::kFloat, /*zero=*/true);
  }
  loss.backward();
  for (size_t u = 0; u < kept.units().size(); ++u) {
    EXPECT_TRUE(at::allclose(sharded.units()[u].flat_grads(), kept.units()[u].flat_grads(), 1e-6, 1e-7))
        << kept.units()[u].name();
  }
}

// Released parameters free their bytes even while the forward graph holds
// views of them (a linear saves weight.t()), and the next materialisation
// refills the storage those views share, so backward reads the re-gathered
// values. Counted by the storage pool's allocator side (what is really
// still allocated), and through a view held as autograd holds one.
TEST(UnitStorage, ReleaseFreesStorageThatTheForwardGraphStillViews) {
  GptModel model(tiny(), at::kCPU, /*allocate=*/false);
  for (Unit& unit : model.units()) unit.materialize_params(at::kFloat, Unit::Fill::from_seed, 3);
  const at::Tensor tokens = at::randint(0, 32, {2, 8}, at::kLong);
  const at::Tensor loss = loss_of(model, tokens);  // the graph saves views of the weights
  Unit& block = model.units()[1];
  const at::Tensor held = block.flat_params().narrow(0, 0, 4);  // a view, as autograd holds one
  for (Unit& unit : model.units()) {
    EXPECT_GT(storage_pool().in_use_bytes(unit.params_tag()), 0) << unit.name();
    unit.release_params();
  }
  for (const Unit& unit : model.units()) {
    EXPECT_EQ(storage_pool().in_use_bytes(unit.params_tag()), 0) << unit.name() << ": freed although the graph lives";
  }
  EXPECT_EQ(held.storage().nbytes(), 0u);

  // Gathered again with other values: the held view reads them.
  block.materialize_params(at::kFloat, Unit::Fill::zeros);
  EXPECT_EQ(held.storage().nbytes(), static_cast<size_t>(block.numel()) * sizeof(float));
  block.flat_params().fill_(0.5f);
  EXPECT_TRUE(at::equal(held, at::full({4}, 0.5f)));
  block.release_params();
  (void)loss;
}

TEST(StoragePool, ReusesBlocksAndKeepsNoMoreThanItsPeak) {
  StoragePool pool;
  const StoragePoolStats before = pool.stats();
  { c10::DataPtr a = pool.allocate(1 << 20, "a"); }
  { c10::DataPtr a = pool.allocate(1 << 20, "a"); }  // the same block again
  StoragePoolStats s = pool.stats();
  EXPECT_EQ(s.mapped - before.mapped, 1);
  EXPECT_EQ(s.reused - before.reused, 1);
  EXPECT_EQ(s.idle_bytes, 1 << 20);
  // Another size: the idle block goes, so in-use + idle never exceed the
  // peak in use.
  c10::DataPtr b = pool.allocate(2 << 20, "b");
  s = pool.stats();
  EXPECT_EQ(s.in_use_bytes, 2 << 20);
  EXPECT_LE(s.in_use_bytes + s.idle_bytes, s.high_water_bytes);
  EXPECT_EQ(pool.in_use_bytes("b"), 2 << 20);
  EXPECT_EQ(pool.in_use_bytes("a"), 0);
}

// An idle block is kept for reuse but holds no resident pages: it would
// otherwise sit on top of the step's peak (storage_pool.h). mincore() asks
// the kernel which pages of the (still mapped) block are resident.
TEST(StoragePool, IdleBlocksHoldNoResidentPages) {
  StoragePool pool;
  const size_t bytes = 64 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* data = nullptr;
  {
    c10::DataPtr block = pool.allocate(bytes, "idle");
    data = block.get();
    std::memset(data, 1, bytes);
    EXPECT_EQ(resident_pages(data, bytes), 64);
  }
  ASSERT_EQ(pool.stats().idle_bytes, static_cast<int64_t>(bytes));  // kept, still mapped
  EXPECT_EQ(resident_pages(data, bytes), 0);
  c10::DataPtr again = pool.allocate(bytes, "idle");
  ASSERT_EQ(again.get(), data);  // the same block, zero-filled by the kernel
  EXPECT_EQ(static_cast<unsigned char*>(again.get())[bytes - 1], 0);
}

TEST(UnitStorage, ReducedPrecisionStorageComputesInThatDtype) {
  GptModel model(tiny(), at::kCPU, /*allocate=*/false);
  for (Unit& unit : model.units()) {
    unit.materialize_params(at::kBFloat16, Unit::Fill::from_seed, 5);
    unit.materialize_grads(at::kBFloat16, /*zero=*/true);
  }
  const at::Tensor tokens = at::randint(0, 32, {2, 8}, at::kLong);
  model.loss(tokens, tokens).backward();
  EXPECT_EQ(model.units()[1].flat_grads().scalar_type(), at::kBFloat16);
  EXPECT_GT(model.units()[1].flat_grads().to(at::kFloat).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(model.units()[1].params()[0].value.grad().data_ptr(), model.units()[1].flat_grads().data_ptr());
}

}  // namespace
