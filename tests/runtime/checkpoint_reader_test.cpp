// CheckpointReader over a whole checkpoint directory: slices of one tensor
// spread over several ranks' plugin-state files and the host's legacy files,
// rectangles assembled across files, the host's model.safetensors served as
// MODEL space and optimizer.safetensors as OPTIMIZER space, the conflicts
// (shape, dtype, overlap across files) refused naming both files, strings
// taken from rank 0, and the commit-time tiling check across ranks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/safetensors.h"
#include "host/runtime/checkpoint_reader.h"
#include "host/runtime/plugin_state.h"
#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"

namespace accel::runtime {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;

class CheckpointReaderTest : public ::testing::Test {
 protected:
  CheckpointReaderTest()
      : dir_(fs::temp_directory_path() / ("accel_reader_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~CheckpointReaderTest() override { fs::remove_all(dir_); }

  // One rank's plugin-state file: `fill` puts slices into its writer.
  void write_rank(int rank, const std::function<void(PluginStateWriter&)>& fill) {
    PluginStateWriter writer;
    fill(writer);
    writer.write(dir_ / plugin_state_file_name(rank));
  }
  static void put(PluginStateWriter& w, AccelCheckpointSpace space, const std::string& name,
                  const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset, const at::Tensor& t,
                  const std::string& plugin = "fsdp") {
    TensorView view(t);
    w.put(plugin, space, name, global_shape, offset, view.get());
  }
  // The host's legacy files: whole tensors by name.
  void write_whole(const char* file, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    checkpoint::SafetensorsWriter writer;
    for (const auto& [name, t] : tensors) {
      writer.add(name, checkpoint::DType::F32, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                 t.data_ptr(), t.nbytes());
    }
    writer.write(dir_ / file);
  }
  std::string open_error() {
    try {
      CheckpointReader::open_directory(dir_);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

const at::Tensor kFull = at::arange(48, at::kFloat).reshape({8, 6});

TEST_F(CheckpointReaderTest, RectanglesAreAssembledAcrossRanksFiles) {
  // Rank 0 holds rows 0..2 and a partial row 3 (cols 0..1), rank 1 the rest
  // of row 3 and rows 4..7: a flat shard cut mid-row, as FSDP puts it.
  write_rank(0, [&](PluginStateWriter& w) {
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {0, 0}, kFull.narrow(0, 0, 3));
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {3, 0}, kFull.narrow(0, 3, 1).narrow(1, 0, 2));
  });
  write_rank(1, [&](PluginStateWriter& w) {
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {3, 2}, kFull.narrow(0, 3, 1).narrow(1, 2, 4));
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {4, 0}, kFull.narrow(0, 4, 4));
  });
  const CheckpointReader reader = CheckpointReader::open_directory(dir_);
  EXPECT_EQ(reader.files().size(), 2u);

  const StoredTensor* t = reader.find("", ACCEL_CHECKPOINT_MODEL, "h.0.w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->slices.size(), 4u);
  EXPECT_TRUE(at::equal(reader.read_whole(*t), kFull));

  // A rectangle touching all four slices, read into another float dtype.
  at::Tensor region = at::zeros({4, 3}, at::kDouble);
  reader.read("", ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {2, 1}, region);
  EXPECT_TRUE(at::equal(region, kFull.narrow(0, 2, 4).narrow(1, 1, 3).to(at::kDouble)));

  // Through the ABI view, as a plugin's get does: rows of rank 1's file only.
  at::Tensor tail = at::zeros({2, 6});
  TensorView tail_view(tail);
  reader.get("any", ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {6, 0}, tail_view.get());
  EXPECT_TRUE(at::equal(tail, kFull.narrow(0, 6, 2)));
}

TEST_F(CheckpointReaderTest, LegacyHostFilesAreModelAndOptimizerSpace) {
  const at::Tensor wte = at::randn({5, 3});
  const at::Tensor bias = at::randn({3});
  const at::Tensor avg = at::randn({5, 3});
  const at::Tensor avg_sq = at::rand({5, 3});
  write_whole(CheckpointReader::kModelFile, {{"wte.weight", wte}, {"h.0.bias", bias}});
  write_whole(CheckpointReader::kOptimizerFile, {{"wte.weight.exp_avg", avg}, {"wte.weight.exp_avg_sq", avg_sq}});
  // A plugin's own state beside them.
  write_rank(0, [&](PluginStateWriter& w) {
    put(w, ACCEL_CHECKPOINT_PLUGIN, "amax_history", {2}, {0}, at::ones({2}), "fp8");
    w.put_string("fp8", ACCEL_CHECKPOINT_PLUGIN, "recipe", "delayed");
  });
  const CheckpointReader reader = CheckpointReader::open_directory(dir_);

  std::vector<std::string> model_names;
  for (const StoredTensor* t : reader.tensors_in(ACCEL_CHECKPOINT_MODEL)) model_names.push_back(t->name);
  EXPECT_EQ(model_names, (std::vector<std::string>{"h.0.bias", "wte.weight"}));  // sorted

  at::Tensor out = at::zeros({5, 3});
  reader.read("", ACCEL_CHECKPOINT_MODEL, "wte.weight", {5, 3}, {0, 0}, out);
  EXPECT_TRUE(at::equal(out, wte));
  // A shard of a legacy whole tensor: only its rows are read.
  at::Tensor shard = at::zeros({2, 3});
  reader.read("", ACCEL_CHECKPOINT_MODEL, "wte.weight", {5, 3}, {3, 0}, shard);
  EXPECT_TRUE(at::equal(shard, wte.narrow(0, 3, 2)));
  reader.read("", ACCEL_CHECKPOINT_OPTIMIZER, "exp_avg/wte.weight", {5, 3}, {0, 0}, out);
  EXPECT_TRUE(at::equal(out, avg));
  reader.read("", ACCEL_CHECKPOINT_OPTIMIZER, "exp_avg_sq/wte.weight", {5, 3}, {0, 0}, out);
  EXPECT_TRUE(at::equal(out, avg_sq));
  EXPECT_EQ(reader.find("", ACCEL_CHECKPOINT_OPTIMIZER, "wte.weight.exp_avg"), nullptr);

  ASSERT_NE(reader.find_string("fp8", ACCEL_CHECKPOINT_PLUGIN, "recipe"), nullptr);
  EXPECT_EQ(*reader.find_string("fp8", ACCEL_CHECKPOINT_PLUGIN, "recipe"), "delayed");
  EXPECT_NE(reader.find("fp8", ACCEL_CHECKPOINT_PLUGIN, "amax_history"), nullptr);
  EXPECT_EQ(reader.find("other", ACCEL_CHECKPOINT_PLUGIN, "amax_history"), nullptr);
}

TEST_F(CheckpointReaderTest, OptimizerFileWithAnotherNameIsRefused) {
  write_whole(CheckpointReader::kOptimizerFile, {{"wte.weight.momentum", at::ones({2})}});
  EXPECT_NE(open_error().find("is not an optimizer state"), std::string::npos) << open_error();
}

TEST_F(CheckpointReaderTest, OverlapAcrossFilesNamesBothFiles) {
  // A sharding plugin also put a parameter the host saved whole.
  write_whole(CheckpointReader::kModelFile, {{"h.0.w", kFull}});
  write_rank(1, [&](PluginStateWriter& w) {
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {4, 0}, kFull.narrow(0, 4, 4));
  });
  const std::string error = open_error();
  EXPECT_NE(error.find("model tensor 'h.0.w'"), std::string::npos) << error;
  EXPECT_NE(error.find("overlaps"), std::string::npos) << error;
  EXPECT_NE(error.find("plugin_state.rank1.safetensors"), std::string::npos) << error;
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
}

TEST_F(CheckpointReaderTest, GlobalShapeOrDtypeConflictAcrossFilesNamesBothFiles) {
  write_rank(0, [&](PluginStateWriter& w) {
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {0, 0}, kFull.narrow(0, 0, 4));
  });
  write_rank(1, [&](PluginStateWriter& w) {
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {9, 6}, {4, 0}, kFull.narrow(0, 4, 4));
  });
  std::string error = open_error();
  EXPECT_NE(error.find("global shape [9, 6] in plugin_state.rank1.safetensors differs from [8, 6] in "
                       "plugin_state.safetensors"),
            std::string::npos)
      << error;

  write_rank(1, [&](PluginStateWriter& w) {
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {4, 0}, kFull.narrow(0, 4, 4).to(at::kBFloat16));
  });
  error = open_error();
  EXPECT_NE(error.find("dtype bf16 in plugin_state.rank1.safetensors differs from f32"), std::string::npos) << error;
}

TEST_F(CheckpointReaderTest, PartlySavedRegionsAndMismatchesKeepTheirStatuses) {
  write_rank(0, [&](PluginStateWriter& w) {
    put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {0, 0}, kFull.narrow(0, 0, 4));
  });
  // Rank 1's half is missing: reading it, or all of it, is NOT_FOUND.
  const CheckpointReader reader = CheckpointReader::open_directory(dir_);
  const auto status_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const ServiceError& e) {
      return e.status();
    }
    return ACCEL_OK;
  };
  at::Tensor half = at::zeros({4, 6});
  EXPECT_EQ(status_of([&] { reader.read("", ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {0, 0}, half); }), ACCEL_OK);
  EXPECT_EQ(status_of([&] { reader.read("", ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {4, 0}, half); }),
            ACCEL_ERROR_NOT_FOUND);
  EXPECT_EQ(status_of([&] { reader.read_whole(*reader.find("", ACCEL_CHECKPOINT_MODEL, "h.0.w")); }),
            ACCEL_ERROR_NOT_FOUND);
  EXPECT_EQ(status_of([&] { reader.read("", ACCEL_CHECKPOINT_MODEL, "h.0.w", {4, 12}, {0, 0}, half); }),
            ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of([&] { reader.read("", ACCEL_CHECKPOINT_MODEL, "nope", {8, 6}, {0, 0}, half); }),
            ACCEL_ERROR_NOT_FOUND);
  at::Tensor ints = at::zeros({4, 6}, at::kInt);
  EXPECT_EQ(status_of([&] { reader.check_readable("", ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {0, 0}, {4, 6},
                                                  at::kInt); }),
            ACCEL_ERROR_INVALID_ARGUMENT);
}

TEST_F(CheckpointReaderTest, RankZerosStringWinsAndUnlistedFilesAreIgnored) {
  write_rank(1, [&](PluginStateWriter& w) { w.put_string("rec", ACCEL_CHECKPOINT_PLUGIN, "seen", "from rank 1"); });
  write_rank(0, [&](PluginStateWriter& w) { w.put_string("rec", ACCEL_CHECKPOINT_PLUGIN, "seen", "from rank 0"); });
  EXPECT_EQ(*CheckpointReader::open_directory(dir_).find_string("rec", ACCEL_CHECKPOINT_PLUGIN, "seen"),
            "from rank 0");

  // Committed with a manifest, then a stray file appears: the manifest's
  // list is what the checkpoint holds.
  const fs::path root = dir_ / "root";
  checkpoint::PendingCheckpointDir pending = checkpoint::PendingCheckpointDir::create(root, "step_1");
  fs::copy_file(dir_ / plugin_state_file_name(0), pending.dir() / plugin_state_file_name(0));
  pending.commit();
  fs::copy_file(dir_ / plugin_state_file_name(1), root / "step_1" / "plugin_state.rank7.safetensors");
  const CheckpointReader reader = CheckpointReader::open_directory(root / "step_1");
  EXPECT_EQ(reader.files().size(), 1u);
}

// ACCEL_CHECKPOINT_PUT_STABLE: a stable host slice is lent, not copied.
// Written unstaged (a blocking save) the file holds the plugin's memory as
// it is at write time; staged (a background save, before the plugin's next
// optimizer step) it holds the values of the put, whatever the plugin does
// after; a plain put is copied at once; a device-less strided slice is
// copied too (stage() can only memcpy a contiguous one).
TEST_F(CheckpointReaderTest, StableSlicesAreLentUntilStaged) {
  const at::Tensor original = at::arange(12, at::kFloat).reshape({3, 4});
  at::Tensor lent = original.clone(), staged = original.clone(), copied = original.clone();
  at::Tensor strided = original.clone().t();  // [4, 3], not contiguous
  PluginStateWriter writer;
  const auto put_as = [&](const std::string& name, const at::Tensor& t, bool stable) {
    TensorView view(t);
    const std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    writer.put("fsdp", ACCEL_CHECKPOINT_MODEL, name, shape, std::vector<int64_t>(shape.size(), 0), view.get(), stable);
  };
  put_as("lent", lent, true);
  put_as("copied", copied, false);
  put_as("strided", strided, true);
  const int64_t bytes = static_cast<int64_t>(original.nbytes());
  EXPECT_EQ(writer.lent_bytes(), bytes);      // "lent" only
  EXPECT_EQ(writer.held_bytes(), 2 * bytes);  // "copied" and "strided"
  // The optimizer step after a blocking save's write: nothing of it is seen.
  lent.add_(100);
  copied.add_(100);
  strided.add_(100);
  writer.write(dir_ / plugin_state_file_name(0));
  {
    const CheckpointReader reader = CheckpointReader::open_directory(dir_);
    EXPECT_TRUE(at::equal(reader.read_whole(*reader.find("", ACCEL_CHECKPOINT_MODEL, "lent")), lent));
    EXPECT_TRUE(at::equal(reader.read_whole(*reader.find("", ACCEL_CHECKPOINT_MODEL, "copied")), original));
    EXPECT_TRUE(at::equal(reader.read_whole(*reader.find("", ACCEL_CHECKPOINT_MODEL, "strided")), original.t()));
  }
  // A background save: staged into a recycled buffer, then the step runs.
  PluginStateWriter background;
  background.recycle(std::move(writer));
  {
    TensorView view(staged);
    background.put("fsdp", ACCEL_CHECKPOINT_MODEL, "lent", {3, 4}, {0, 0}, view.get(), true);
  }
  background.stage();
  // The first writer's lent slice was the plugin's memory, never a spare.
  EXPECT_TRUE(at::equal(lent, original + 100));
  EXPECT_EQ(background.lent_bytes(), 0);
  EXPECT_EQ(background.held_bytes(), bytes);
  staged.add_(100);
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  background.write(dir_ / plugin_state_file_name(0));
  const CheckpointReader reader = CheckpointReader::open_directory(dir_);
  EXPECT_TRUE(at::equal(reader.read_whole(*reader.find("", ACCEL_CHECKPOINT_MODEL, "lent")), original));
}

TEST(PluginStateFileNames, RankZeroKeepsTheLegacyName) {
  EXPECT_EQ(plugin_state_file_name(0), "plugin_state.safetensors");
  EXPECT_EQ(plugin_state_file_name(12), "plugin_state.rank12.safetensors");
  EXPECT_EQ(plugin_state_file_rank("plugin_state.safetensors"), 0);
  EXPECT_EQ(plugin_state_file_rank("plugin_state.rank12.safetensors"), 12);
  EXPECT_EQ(plugin_state_file_rank("plugin_state.rank012.safetensors"), std::nullopt);
  EXPECT_EQ(plugin_state_file_rank("plugin_state.rank.safetensors"), std::nullopt);
  EXPECT_EQ(plugin_state_file_rank("model.safetensors"), std::nullopt);
}

TEST(FindOverlappingBoxes, SweepsRowsAndSkipsEmptyBoxes) {
  EXPECT_EQ(find_overlapping_boxes({{{0, 0}, {2, 4}}, {{2, 0}, {2, 4}}, {{4, 0}, {0, 4}}}), std::nullopt);
  const auto clash = find_overlapping_boxes({{{0, 0}, {2, 4}}, {{4, 0}, {2, 4}}, {{1, 3}, {1, 1}}});
  ASSERT_TRUE(clash.has_value());
  EXPECT_EQ(*clash, (std::pair<size_t, size_t>{0, 2}));
  // Column slices of the same rows.
  EXPECT_EQ(find_overlapping_boxes({{{0, 0}, {4, 2}}, {{0, 2}, {4, 2}}}), std::nullopt);
  // Two puts of one scalar.
  EXPECT_TRUE(find_overlapping_boxes({{{}, {}}, {{}, {}}}).has_value());
}

// Plugin-state metadata is read by the one JSON rule (accel/sdk/json_input.hpp):
// depth limit, exact types, bounded messages (refusals printed values with
// dump()), and an offset near INT64_MAX is refused rather than overflowing
// offset + shape.
TEST_F(CheckpointReaderTest, MetadataIsReadByTheJsonRule) {
  write_rank(0, [&](PluginStateWriter& w) { put(w, ACCEL_CHECKPOINT_MODEL, "h.0.w", {8, 6}, {0, 0}, kFull); });
  const fs::path good = dir_ / plugin_state_file_name(0);
  const checkpoint::SafetensorsFile file = checkpoint::SafetensorsFile::open(good);
  const nlohmann::json meta = nlohmann::json::parse(file.metadata().at(kPluginStateMetadataKey));
  const std::string stored = meta.at("tensors").begin().key();
  const auto error_with = [&](const std::string& metadata) -> std::string {
    checkpoint::SafetensorsWriter writer;
    // The writer keeps pointers until write(): the bytes live as long.
    std::vector<std::vector<char>> kept;
    for (const checkpoint::TensorInfo& info : file.tensors()) {
      std::vector<char>& bytes = kept.emplace_back(info.nbytes());
      file.read(info, bytes.data(), bytes.size());
      writer.add(info.name, info.dtype, info.shape, bytes.data(), bytes.size());
    }
    writer.set_metadata(kPluginStateMetadataKey, metadata);
    const fs::path path = dir_ / "edited.safetensors";
    writer.write(path);
    try {
      CheckpointReader reader;
      reader.add_plugin_state_file(path);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  };
  const auto edited = [&](const std::string& pointer, const nlohmann::json& value) {
    nlohmann::json j = meta;
    j[nlohmann::json::json_pointer(pointer)] = value;
    return error_with(j.dump());
  };
  std::string escaped;  // stored names hold '/': a JSON pointer spells it ~1
  for (char c : stored) escaped += c == '/' ? std::string("~1") : c == '~' ? std::string("~0") : std::string(1, c);
  const std::string tensor = "/tensors/" + escaped;
  EXPECT_EQ(error_with(meta.dump()), "");
  std::string many(2 * (1 << 19), ',');
  for (size_t i = 0; i < many.size(); i += 2) many[i] = '7';
  many.pop_back();
  const std::pair<std::string, std::string> cases[] = {
      {error_with("{\"tensors\":" + std::string(300000, '[') + std::string(300000, ']') + "}"),
       "metadata: nests arrays or objects deeper than 64 levels"},
      {edited("/format", nlohmann::json::parse(std::string(40, '[') + std::string(40, ']'))),
       "\"format\" must be a string, got an array of 1 element(s)"},
      {edited("/format_version", 1.5), "\"format_version\" must be an integer, got 1.5"},
      {edited(tensor + "/global_shape/0", 8.5), "global_shape[0]\" must be an integer, got 8.5"},
      {edited(tensor + "/global_shape/1", -6), "global_shape[1]\" must be at least 0, got -6"},
      {edited(tensor + "/slices/0/offset/0", INT64_MAX), "lies outside its global shape"},
      {edited(tensor + "/space", std::string(1 << 20, 's')), "(1048576 characters)"},
      {edited(tensor + "/dtype", nlohmann::json::parse("[" + many + "]")),
       "dtype\" must be a string, got an array of 524288 element(s)"},
      {edited(tensor + "/slices/0/tensor", std::string(1 << 20, 't')), "is missing"},
      {edited("/strings", nlohmann::json{{"k", {{"value", nlohmann::json::parse("[" + many + "]")}}}}),
       "\"strings.k.value\" must be a string, got an array of 524288 element(s)"},
  };
  for (const auto& [error, expected] : cases) {
    EXPECT_NE(error.find(expected), std::string::npos) << error.substr(0, 300);
    EXPECT_LT(error.size(), 500u) << error.substr(0, 300);
    EXPECT_EQ(error.find('\n'), std::string::npos);
  }
}

// A slice inventory (another rank's text) likewise.
TEST(SliceInventoryJson, IsReadByTheJsonRule) {
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      SliceInventory::from_json(text);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(R"({"@model/w":{"dtype":"F32","global_shape":[8,6],"boxes":[[[0,0],[8,6]]]}})"), "");
  EXPECT_EQ(error_of("{\"@model/w\":" + std::string(300000, '[') + std::string(300000, ']') + "}"),
            "slice inventory: nests arrays or objects deeper than 64 levels");
  EXPECT_NE(error_of(R"({"@model/w":{"dtype":"F32","global_shape":[8,6],"boxes":[[[0,0.5],[8,6]]]}})")
                .find("\"@model/w.boxes[0][0][1]\" must be an integer, got 0.5"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"@model/w":{"dtype":"F32","global_shape":[8,-6],"boxes":[]}})")
                .find("\"@model/w.global_shape[1]\" must be at least 0, got -6"),
            std::string::npos);
  const std::string huge = error_of(R"({"@model/w":{"dtype":")" + std::string(1 << 20, 'd') +
                                    R"(","global_shape":[8,6],"boxes":[]}})");
  EXPECT_NE(huge.find("(1048576 characters)"), std::string::npos) << huge.substr(0, 300);
  EXPECT_LT(huge.size(), 300u);
}

// The commit-time check over every rank's inventory (accel/checkpoint.h:
// "the slices of each tensor tile its global shape, without gap or overlap").
TEST(SliceInventoryTiling, AcceptsATilingAndNamesGapsOverlapsAndDisagreements) {
  const auto inventory = [](std::vector<SliceBox> boxes, std::vector<int64_t> shape = {8, 6},
                            checkpoint::DType dtype = checkpoint::DType::F32) {
    SliceInventory inv;
    for (SliceBox& box : boxes) inv.add("@model/w", dtype, shape, std::move(box));
    return SliceInventory::from_json(inv.to_json());  // as gathered to rank 0
  };
  const auto error_of = [](const std::vector<SliceInventory>& ranks) -> std::string {
    try {
      SliceInventory::check_tiling(ranks);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of({inventory({{{0, 0}, {4, 6}}}), inventory({{{4, 0}, {4, 6}}})}), "");
  EXPECT_NE(error_of({inventory({{{0, 0}, {4, 6}}}), inventory({{{4, 0}, {3, 6}}})}).find("cover 42 of 48"),
            std::string::npos);
  // Two replicas both saving: overlap, naming the ranks.
  const std::string overlap = error_of({inventory({{{0, 0}, {8, 6}}}), inventory({{{0, 0}, {8, 6}}})});
  EXPECT_NE(overlap.find("the slice of rank 0 at [0, 0] overlaps the slice of rank 1"), std::string::npos) << overlap;
  EXPECT_NE(error_of({inventory({{{0, 0}, {4, 6}}}), inventory({{{4, 0}, {4, 6}}}, {9, 6})}).find("rank 1 saved it"),
            std::string::npos);
  // A rank that saved nothing of it is fine.
  EXPECT_EQ(error_of({inventory({{{0, 0}, {8, 6}}}), SliceInventory{}}), "");
}

}  // namespace
}  // namespace accel::runtime
