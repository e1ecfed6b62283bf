// The checkpoint area: slices put in save_state go through one safetensors
// file and come back from get in load_state — the same slice, a whole tensor
// assembled from slices, a region across slices, converted float dtypes —
// with the phase, not-found, shape and dtype errors of accel/checkpoint.h.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "host/checkpoint/safetensors.h"
#include "host/runtime/checkpoint_reader.h"
#include "host/runtime/plugin_state.h"
#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

namespace fs = std::filesystem;

class CheckpointServicesTest : public ServicesTest {
 protected:
  CheckpointServicesTest()
      : dir_(fs::temp_directory_path() / ("accel_plugin_state_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~CheckpointServicesTest() override { fs::remove_all(dir_); }

  const AccelCheckpointServices* ckpt() { return services->checkpoint; }

  AccelStatus put(AccelHost* h, const char* name, const std::vector<int64_t>& global_shape,
                  const std::vector<int64_t>& offset, const DLTensor* local,
                  AccelCheckpointSpace space = ACCEL_CHECKPOINT_PLUGIN) {
    AccelCheckpointSliceArgs a{};
    a.struct_size = sizeof(a);
    a.space = space;
    a.ndim = static_cast<int32_t>(global_shape.size());
    a.name = name;
    a.global_shape = global_shape.data();
    a.global_offset = offset.data();
    a.local = local;
    return ckpt()->put(h, &a);
  }
  AccelStatus get(AccelHost* h, const char* name, const std::vector<int64_t>& global_shape,
                  const std::vector<int64_t>& offset, const DLTensor* local,
                  AccelCheckpointSpace space = ACCEL_CHECKPOINT_PLUGIN) {
    AccelCheckpointSliceArgs a{};
    a.struct_size = sizeof(a);
    a.space = space;
    a.ndim = static_cast<int32_t>(global_shape.size());
    a.name = name;
    a.global_shape = global_shape.data();
    a.global_offset = offset.data();
    a.local = local;
    return ckpt()->get(h, &a);
  }

  // save_state: the trainer installs a writer around the hooks, writes it.
  void save(const std::function<void()>& hooks) {
    PluginStateWriter writer;
    context.state_writer = &writer;
    hooks();
    context.state_writer = nullptr;
    writer.write(path());
  }
  // What the trainer does on resume: index the whole checkpoint directory.
  void open_for_load() {
    reader_ = CheckpointReader::open_directory(dir_);
    context.state_reader = &reader_;
  }
  fs::path path() const { return dir_ / "plugin_state.safetensors"; }

  fs::path dir_;
  CheckpointReader reader_;
};

TEST_F(CheckpointServicesTest, OutsideSaveOrLoadStateIsAPreconditionFailure) {
  const at::Tensor t = at::ones({2});
  View v(t);
  EXPECT_EQ(put(&host, "x", {2}, {0}, v), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(last_error(), "checkpoint put: allowed only inside save_state");
  EXPECT_EQ(get(&host, "x", {2}, {0}, v), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(ckpt()->put_string(&host, ACCEL_CHECKPOINT_PLUGIN, "k", "v"), ACCEL_ERROR_FAILED_PRECONDITION);
  const char* value = nullptr;
  EXPECT_EQ(ckpt()->get_string(&host, ACCEL_CHECKPOINT_PLUGIN, "k", &value), ACCEL_ERROR_FAILED_PRECONDITION);
}

TEST_F(CheckpointServicesTest, SlicesRoundTripThroughAFile) {
  const at::Tensor full = at::arange(24, at::kFloat).reshape({6, 4});
  const at::Tensor history = at::rand({3, 5});
  save([&] {
    // Two row slices of one tensor (a sharded state), the second from a
    // non-contiguous view; reused buffers are fine: put copies.
    at::Tensor staging = full.narrow(0, 0, 2).clone();
    View top(staging);
    ASSERT_EQ(put(&host, "master", {6, 4}, {0, 0}, top), ACCEL_OK) << last_error();
    staging.fill_(-1);
    const at::Tensor bottom_t = full.narrow(0, 2, 4).t().contiguous().t();  // column-major
    View bottom(bottom_t);
    ASSERT_EQ(put(&host, "master", {6, 4}, {2, 0}, bottom), ACCEL_OK) << last_error();
    View h(history);
    ASSERT_EQ(put(&host, "amax_history", {3, 5}, {0, 0}, h), ACCEL_OK);
    ASSERT_EQ(ckpt()->put_string(&host, ACCEL_CHECKPOINT_PLUGIN, "recipe", "{\"margin\":0}"), ACCEL_OK);
    // Another plugin's state of the same name does not collide.
    const at::Tensor mine = at::zeros({1});
    View m(mine);
    ASSERT_EQ(put(&other_host, "amax_history", {1}, {0}, m), ACCEL_OK);
  });
  open_for_load();

  at::Tensor whole = at::zeros({6, 4});
  View whole_v(whole);
  ASSERT_EQ(get(&host, "master", {6, 4}, {0, 0}, whole_v), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(whole, full));

  at::Tensor same = at::zeros({3, 5});
  View same_v(same);
  ASSERT_EQ(get(&host, "amax_history", {3, 5}, {0, 0}, same_v), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(same, history));

  // A region across both saved slices, into a wider float dtype.
  at::Tensor region = at::zeros({2, 3}, at::kDouble);
  View region_v(region);
  ASSERT_EQ(get(&host, "master", {6, 4}, {1, 1}, region_v), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(region, full.narrow(0, 1, 2).narrow(1, 1, 3).to(at::kDouble)));

  const char* recipe = nullptr;
  ASSERT_EQ(ckpt()->get_string(&host, ACCEL_CHECKPOINT_PLUGIN, "recipe", &recipe), ACCEL_OK);
  EXPECT_STREQ(recipe, "{\"margin\":0}");

  AccelCheckpointTensorInfo info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(ckpt()->info(&host, ACCEL_CHECKPOINT_PLUGIN, "master", &info), ACCEL_OK);
  ASSERT_EQ(info.ndim, 2);
  EXPECT_EQ(info.global_shape[0], 6);
  EXPECT_EQ(info.global_shape[1], 4);
  EXPECT_TRUE(accel_dtype_equal(info.dtype, accel_dtype(kDLFloat, 32)));
  ASSERT_EQ(ckpt()->info(&other_host, ACCEL_CHECKPOINT_PLUGIN, "amax_history", &info), ACCEL_OK);
  EXPECT_EQ(info.global_shape[0], 1);
  EXPECT_EQ(ckpt()->info(&other_host, ACCEL_CHECKPOINT_PLUGIN, "master", &info), ACCEL_ERROR_NOT_FOUND);
}

TEST_F(CheckpointServicesTest, SharedSpacesAndFp8KeepTheirBytes) {
  const at::Tensor shard = at::randn({4, 3}).to(at::ScalarType::Float8_e4m3fn);
  save([&] {
    View v(shard);
    ASSERT_EQ(put(&host, "exp_avg/h.0.attn.c_attn.weight", {8, 3}, {4, 0}, v, ACCEL_CHECKPOINT_OPTIMIZER), ACCEL_OK)
        << last_error();
  });
  open_for_load();
  at::Tensor back = at::empty({4, 3}, at::TensorOptions().dtype(at::ScalarType::Float8_e4m3fn));
  View back_v(back);
  // Any plugin reads the shared spaces.
  ASSERT_EQ(get(&other_host, "exp_avg/h.0.attn.c_attn.weight", {8, 3}, {4, 0}, back_v, ACCEL_CHECKPOINT_OPTIMIZER),
            ACCEL_OK)
      << last_error();
  EXPECT_TRUE(at::equal(back.view(at::kByte), shard.view(at::kByte)));
  // FP8 is never converted implicitly.
  at::Tensor as_float = at::empty({4, 3});
  View f_v(as_float);
  EXPECT_EQ(get(&host, "exp_avg/h.0.attn.c_attn.weight", {8, 3}, {4, 0}, f_v, ACCEL_CHECKPOINT_OPTIMIZER),
            ACCEL_ERROR_INVALID_ARGUMENT);
  // The half that was never saved.
  EXPECT_EQ(get(&host, "exp_avg/h.0.attn.c_attn.weight", {8, 3}, {0, 0}, back_v, ACCEL_CHECKPOINT_OPTIMIZER),
            ACCEL_ERROR_NOT_FOUND);
  EXPECT_NE(last_error().find("only partly saved (0 of 12"), std::string::npos) << last_error();
}

TEST_F(CheckpointServicesTest, PutRefusesBadSlices) {
  save([&] {
    const at::Tensor t = at::ones({2, 2});
    View v(t);
    EXPECT_EQ(put(&host, "w", {3, 2}, {2, 0}, v), ACCEL_ERROR_INVALID_ARGUMENT);  // outside
    EXPECT_NE(last_error().find("outside the global shape"), std::string::npos) << last_error();
    ASSERT_EQ(put(&host, "w", {4, 2}, {0, 0}, v), ACCEL_OK);
    EXPECT_EQ(put(&host, "w", {4, 2}, {1, 0}, v), ACCEL_ERROR_INVALID_ARGUMENT);  // overlaps
    EXPECT_EQ(put(&host, "w", {4, 3}, {2, 0}, v), ACCEL_ERROR_INVALID_ARGUMENT);  // other global shape
    const at::Tensor d = at::ones({2, 2}, at::kDouble);
    View dv(d);
    EXPECT_EQ(put(&host, "w", {4, 2}, {2, 0}, dv), ACCEL_ERROR_INVALID_ARGUMENT);  // other dtype
    EXPECT_EQ(put(&host, "w", {4}, {0}, v), ACCEL_ERROR_INVALID_ARGUMENT);        // other ndim
    EXPECT_EQ(put(&host, "", {2, 2}, {0, 0}, v), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(put(&host, "w", {4, 2}, {0, 0}, v, static_cast<AccelCheckpointSpace>(9)), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_THROW(context.state_writer->check_complete(), std::exception);  // rows 2..3 missing
  });
}

TEST_F(CheckpointServicesTest, ExportSpaceMakesAPlainModelFileOfWholeTensorsFromRankZero) {
  const at::Tensor w = at::randn({4, 3}).to(at::kBFloat16);
  const fs::path model_file = dir_ / "model_16bit.safetensors";
  save([&] {
    View v(w);
    const at::Tensor half = w.narrow(0, 0, 2).contiguous();
    View hv(half);
    EXPECT_EQ(put(&host, "h.0.w", {4, 3}, {0, 0}, hv, ACCEL_CHECKPOINT_EXPORT), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(last_error().find("takes whole tensors"), std::string::npos) << last_error();
    ASSERT_EQ(put(&host, "h.0.w", {4, 3}, {0, 0}, v, ACCEL_CHECKPOINT_EXPORT), ACCEL_OK) << last_error();
    EXPECT_EQ(put(&host, "h.0.w", {4, 3}, {0, 0}, v, ACCEL_CHECKPOINT_EXPORT), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(last_error().find("put twice"), std::string::npos) << last_error();
    EXPECT_EQ(ckpt()->put_string(&host, ACCEL_CHECKPOINT_EXPORT, "k", "v"), ACCEL_ERROR_INVALID_ARGUMENT);
    context.identity.rank = 1;
    EXPECT_EQ(put(&host, "h.1.w", {4, 3}, {0, 0}, v, ACCEL_CHECKPOINT_EXPORT), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(last_error().find("only world rank 0"), std::string::npos) << last_error();
    context.identity.rank = 0;
    // Kept apart from the plugin state: no slice in the inventory.
    EXPECT_TRUE(context.state_writer->empty());
    ASSERT_TRUE(context.state_writer->has_exports());
    context.state_writer->write_exports(model_file);
  });
  // A plain safetensors file: the name as given, the dtype as put, the bytes.
  const checkpoint::SafetensorsFile file = checkpoint::SafetensorsFile::open(model_file);
  ASSERT_EQ(file.tensors().size(), 1u);
  const checkpoint::TensorInfo& entry = file.tensors().front();
  EXPECT_EQ(entry.name, "h.0.w");
  EXPECT_EQ(entry.dtype, checkpoint::DType::BF16);
  EXPECT_EQ(entry.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(file.metadata().empty());
  at::Tensor back = at::empty({4, 3}, at::kBFloat16);
  file.read(entry, back.data_ptr(), back.nbytes());
  EXPECT_TRUE(at::equal(back, w));
  // Never read back.
  open_for_load();
  AccelCheckpointTensorInfo info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(ckpt()->info(&host, ACCEL_CHECKPOINT_EXPORT, "h.0.w", &info), ACCEL_ERROR_NOT_FOUND);
}

TEST_F(CheckpointServicesTest, GetReportsMissingNamesAndShapeMismatches) {
  save([&] {
    const at::Tensor t = at::ones({4});
    View v(t);
    ASSERT_EQ(put(&host, "scale", {4}, {0}, v), ACCEL_OK);
  });
  open_for_load();
  at::Tensor out = at::zeros({4});
  View out_v(out);
  EXPECT_EQ(get(&host, "missing", {4}, {0}, out_v), ACCEL_ERROR_NOT_FOUND);
  EXPECT_EQ(get(&host, "scale", {5}, {0}, out_v), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("[5] requested, [4] saved"), std::string::npos) << last_error();
  AccelCheckpointTensorInfo info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(ckpt()->info(&host, ACCEL_CHECKPOINT_PLUGIN, "missing", &info), ACCEL_ERROR_NOT_FOUND);
  const char* value = nullptr;
  EXPECT_EQ(ckpt()->get_string(&host, ACCEL_CHECKPOINT_PLUGIN, "missing", &value), ACCEL_ERROR_NOT_FOUND);
  EXPECT_TRUE(at::equal(out, at::zeros({4})));
}

TEST_F(CheckpointServicesTest, OpenRefusesFilesWithoutPluginState) {
  checkpoint::SafetensorsWriter plain;
  const float one = 1.0f;
  plain.add("w", checkpoint::DType::F32, {1}, &one, sizeof(one));
  plain.write(path());
  CheckpointReader reader;
  EXPECT_THROW(reader.add_plugin_state_file(path()), checkpoint::CheckpointError);

  checkpoint::SafetensorsWriter lying;
  lying.add("tester/w", checkpoint::DType::F32, {1}, &one, sizeof(one));
  lying.set_metadata("accel.plugin_state",
                     R"({"format":"accel-plugin-state","format_version":1,"strings":{},
                         "tensors":{"tester/w":{"space":"plugin","plugin":"tester","name":"w","dtype":"F32",
                         "global_shape":[1],"slices":[{"tensor":"tester/w","offset":[1]}]}}})");
  lying.write(path());
  try {
    reader.add_plugin_state_file(path());
    FAIL() << "a slice outside its global shape was accepted";
  } catch (const checkpoint::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("outside its global shape"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace accel::runtime::testing
