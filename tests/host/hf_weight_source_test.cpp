// --init-from hf:DIR read slice by slice (host/checkpoint/hf_weight_source.h
// behind model::ParamInit): every flat range (a sharding plugin's shard) and
// every tensor-parallel local slice holds, bit for bit, what reading the
// tensor whole, converting it to fp32 and transposing a Conv1D weight gave;
// and the source reads exactly the bytes of the slice asked for, never the
// rest of the tensor (the test that fails if a rank reads whole tensors).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "host/checkpoint/hf_weight_source.h"
#include "host/model/param_init.h"

using namespace accel;
using accel::checkpoint::DType;
using accel::checkpoint::HfWeightSource;
using accel::checkpoint::SafetensorsFile;
using accel::checkpoint::SafetensorsWriter;
using accel::model::ParamInit;
using accel::model::ParamSpec;
using accel::model::ParamSplit;

namespace {

namespace fs = std::filesystem;

// One stored tensor: its file name, dtype, stored shape and whether the host
// keeps it transposed (a Conv1D weight).
struct Stored {
  std::string name;
  at::ScalarType type;
  std::vector<int64_t> stored_shape;
  bool transposed;
};

DType file_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::F32;
    case at::kBFloat16: return DType::BF16;
    case at::kHalf: return DType::F16;
    default: return DType::F64;
  }
}

class HfWeightSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("accel_hf_source_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // Odd sizes, so no slice boundary falls on a row by luck.
    tensors_ = {{"w", at::kFloat, {7, 13}, false},   {"c", at::kFloat, {13, 7}, true},
                {"b", at::kBFloat16, {9, 11}, false}, {"cb", at::kBFloat16, {11, 9}, true},
                {"h", at::kHalf, {5, 6}, false},      {"d", at::kDouble, {6, 5}, false},
                {"bias", at::kBFloat16, {17}, false}, {"qkv", at::kFloat, {12, 24}, true}};
    SafetensorsWriter writer;
    int64_t k = 0;
    for (const Stored& t : tensors_) {
      // Values with every mantissa bit in use, so a conversion that rounds
      // differently shows.
      at::Tensor value = at::randn(t.stored_shape, at::TensorOptions().dtype(at::kDouble)).mul(1.0 + k++ * 0.37).to(t.type);
      values_.push_back(value.contiguous());
      writer.add(t.name, file_dtype(t.type), t.stored_shape, values_.back().data_ptr(), values_.back().nbytes());
    }
    writer.write(dir_ / "model.safetensors");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::shared_ptr<HfWeightSource> source() const {
    auto s = std::make_shared<HfWeightSource>("hf:" + dir_.string());
    const size_t f = s->add_file(SafetensorsFile::open(dir_ / "model.safetensors"));
    for (const Stored& t : tensors_) {
      std::vector<int64_t> host = t.stored_shape;
      if (t.transposed) std::swap(host[0], host[1]);
      s->add(t.name, f, *s->file(f).find(t.name), host, t.transposed);
    }
    return s;
  }

  // What reading the tensor whole gave before: converted to fp32, Conv1D
  // weights transposed, contiguous.
  at::Tensor whole(size_t i) const {
    const at::Tensor v = values_[i].to(at::kFloat);
    return tensors_[i].transposed ? v.t().contiguous() : v;
  }
  ParamSpec spec(size_t i) const {
    ParamSpec s;
    s.name = tensors_[i].name;
    const at::Tensor value = whole(i);
    s.shape = std::vector<int64_t>(value.sizes().begin(), value.sizes().end());
    return s;
  }
  int64_t element_bytes(size_t i) const { return static_cast<int64_t>(c10::elementSize(tensors_[i].type)); }

  fs::path dir_;
  std::vector<Stored> tensors_;
  std::vector<at::Tensor> values_;
};

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// The local slice of `split` computed element by element from the whole
// tensor (the definition fill_local implements): along dim, `stride` fused
// blocks of `rows` local rows, rank `index`'s rows of each; rows past the
// tensor's end are padding (zero).
std::vector<float> local_reference(const at::Tensor& whole, const ParamSplit& split, int64_t* present = nullptr) {
  const auto d = static_cast<size_t>(split.dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= whole.size(static_cast<int64_t>(i));
  for (size_t i = d + 1; i < static_cast<size_t>(whole.dim()); ++i) inner *= whole.size(static_cast<int64_t>(i));
  const int64_t size = whole.size(static_cast<int64_t>(d));
  const int64_t padded = split.padded > 0 ? split.padded : size;
  const int64_t local_size = padded / split.parts, rows = local_size / split.stride, block = size / split.stride;
  const float* g = whole.const_data_ptr<float>();
  std::vector<float> out(static_cast<size_t>(outer * local_size * inner));
  if (present) *present = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t lr = 0; lr < local_size; ++lr) {
      const int64_t g_row = (lr / rows) * block + split.index * rows + lr % rows;
      if (present && g_row < size) *present += inner;
      for (int64_t i = 0; i < inner; ++i) {
        out[static_cast<size_t>((o * local_size + lr) * inner + i)] =
            g_row < size ? g[(o * size + g_row) * inner + i] : 0.0f;
      }
    }
  }
  return out;
}

std::vector<ParamSplit> splits_of(const std::vector<int64_t>& shape) {
  std::vector<ParamSplit> out;
  for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
    for (int64_t parts : {2, 3}) {
      for (int64_t index = 0; index < parts; ++index) {
        const int64_t size = shape[static_cast<size_t>(dim)];
        ParamSplit s;
        s.dim = dim;
        s.parts = parts;
        s.index = index;
        s.stride = 1;
        if (size % parts != 0) s.padded = (size + parts - 1) / parts * parts;  // a vocabulary's padding
        out.push_back(s);
        if (dim == 0 && size % (3 * parts) == 0) {  // fused q, k, v
          s.stride = 3;
          s.padded = 0;
          out.push_back(s);
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_F(HfWeightSourceTest, EveryFlatSliceIsTheWholeTensorsSliceBitForBit) {
  const auto weights = source();
  const ParamInit init(0, std::shared_ptr<const model::WeightSource>(weights));
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const at::Tensor ref = whole(i);
    const int64_t n = ref.numel();
    for (int64_t begin = 0; begin < n; begin += 3) {
      for (int64_t count : {int64_t{1}, int64_t{5}, n / 2, n - begin}) {
        if (begin + count > n || count <= 0) continue;
        std::vector<float> got(static_cast<size_t>(count), -1.0f);
        init.fill(spec(i), begin, count, got.data());
        ASSERT_TRUE(same_bits(got.data(), ref.const_data_ptr<float>() + begin, count))
            << tensors_[i].name << " [" << begin << ", " << begin + count << ")";
      }
    }
  }
}

TEST_F(HfWeightSourceTest, ARankReadsExactlyTheBytesOfItsSliceNeverTheWholeTensor) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const int64_t n = whole(i).numel();
    for (int64_t parts : {1, 2, 3, 4}) {
      // A sharding plugin's flat shards: rank r fills [r * n / parts, ...).
      for (int64_t r = 0; r < parts; ++r) {
        const auto weights = source();
        const ParamInit init(0, std::shared_ptr<const model::WeightSource>(weights));
        const int64_t begin = r * n / parts, end = (r + 1) * n / parts;
        std::vector<float> got(static_cast<size_t>(end - begin));
        init.fill(spec(i), begin, end - begin, got.data());
        EXPECT_EQ(weights->bytes_read(), static_cast<uint64_t>((end - begin) * element_bytes(i)))
            << tensors_[i].name << " shard " << r << " of " << parts;
      }
    }
  }
  const auto weights = source();
  EXPECT_EQ(weights->bytes_read(), 0u) << "headers only until a slice is asked for";
  uint64_t stored = 0;
  for (const at::Tensor& v : values_) stored += v.nbytes();
  EXPECT_EQ(weights->bytes_stored(), stored);
  EXPECT_NE(weights->summary().find("this rank read 0 of the " + std::to_string(stored) + " bytes"), std::string::npos)
      << weights->summary();
}

TEST_F(HfWeightSourceTest, EveryTensorParallelSliceIsTheWholeTensorsSliceAndReadsOnlyItself) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ParamSpec s = spec(i);
    for (const ParamSplit& split : splits_of(s.shape)) {
      int64_t present = 0;  // local elements that are not padding
      const std::vector<float> ref = local_reference(whole(i), split, &present);
      const auto n = static_cast<int64_t>(ref.size());
      const std::string what = tensors_[i].name + " dim " + std::to_string(split.dim) + " part " +
                               std::to_string(split.index) + "/" + std::to_string(split.parts) + " stride " +
                               std::to_string(split.stride);
      {
        const auto weights = source();
        const ParamInit init(0, std::shared_ptr<const model::WeightSource>(weights));
        std::vector<float> got(ref.size(), -1.0f);
        init.fill_local(s, split, 0, n, got.data());
        ASSERT_TRUE(same_bits(got.data(), ref.data(), n)) << what;
        // The rank's own elements, each once; padding reads nothing.
        EXPECT_EQ(weights->bytes_read(), static_cast<uint64_t>(present * element_bytes(i))) << what;
      }
      // And a sharding plugin's flat range of that local slice (tensor
      // parallel under fsdp): the same positions.
      const auto weights = source();
      const ParamInit init(0, std::shared_ptr<const model::WeightSource>(weights));
      for (int64_t begin = 0; begin < n; begin += 4) {
        const int64_t count = std::min<int64_t>(n - begin, 1 + begin % 11);
        std::vector<float> got(static_cast<size_t>(count));
        init.fill_local(s, split, begin, count, got.data());
        ASSERT_TRUE(same_bits(got.data(), ref.data() + begin, count)) << what << " at " << begin;
      }
    }
  }
}

TEST_F(HfWeightSourceTest, InMemoryWeightsGiveTheSameSlices) {
  // generate's and the tests' source takes the same block path.
  auto named = std::make_shared<model::NamedWeights>();
  for (size_t i = 0; i < tensors_.size(); ++i) (*named)[tensors_[i].name] = whole(i);
  const ParamInit init(0, std::shared_ptr<const model::NamedWeights>(named));
  for (size_t i = 0; i < tensors_.size(); ++i) {
    for (const ParamSplit& split : splits_of(spec(i).shape)) {
      const std::vector<float> ref = local_reference(whole(i), split);
      std::vector<float> got(ref.size(), -1.0f);
      init.fill_local(spec(i), split, 0, static_cast<int64_t>(ref.size()), got.data());
      ASSERT_TRUE(same_bits(got.data(), ref.data(), static_cast<int64_t>(ref.size()))) << tensors_[i].name;
    }
  }
}

TEST_F(HfWeightSourceTest, TheTieCheckComparesValuesWithoutHoldingEitherWhole) {
  const auto weights = source();
  const SafetensorsFile& file = weights->file(0);
  // "w" against itself holds; against "b" (another shape) it does not.
  EXPECT_TRUE(weights->holds_same_values(0, *file.find("w"), "w"));
  EXPECT_FALSE(weights->holds_same_values(0, *file.find("b"), "w"));
  EXPECT_FALSE(weights->holds_same_values(0, *file.find("d"), "cb"));
  EXPECT_GT(weights->bytes_read(), 0u);
}

TEST_F(HfWeightSourceTest, ANonFloatingWeightIsRefusedByName) {
  SafetensorsWriter writer;
  const std::vector<int32_t> ints(6, 1);
  writer.add("ids", DType::I32, {2, 3}, ints.data(), ints.size() * sizeof(int32_t));
  writer.write(dir_ / "ints.safetensors");
  HfWeightSource s("hf:" + dir_.string());
  const size_t f = s.add_file(SafetensorsFile::open(dir_ / "ints.safetensors"));
  try {
    s.add("ids", f, *s.file(f).find("ids"), {2, 3}, false);
    FAIL() << "an I32 weight was accepted";
  } catch (const checkpoint::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("ids"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("I32"), std::string::npos) << e.what();
  }
}

// Mixtral's experts (hf_moe.cpp): a host parameter [E, 2F, C] stacked
// from one [F, C] tensor per expert and projection (w1 then w3), of mixed
// dtypes. Every flat range, which crosses pieces and experts, holds what
// stacking the converted tensors gives, bit for bit, and reads only its
// own bytes.
TEST(HfWeightSourceStacked, EveryFlatRangeIsTheStackedTensorsBitForBit) {
  const fs::path dir = fs::temp_directory_path() / ("accel_hf_stacked_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int64_t E = 3, F = 5, C = 7;
  std::vector<at::Tensor> values;
  SafetensorsWriter writer;
  std::vector<std::string> names;
  for (int64_t e = 0; e < E; ++e) {
    for (const char* projection : {"w1", "w3"}) {
      const at::ScalarType type = e == 1 ? at::kBFloat16 : at::kFloat;
      values.push_back(at::randn({F, C}, at::TensorOptions().dtype(at::kDouble)).to(type).contiguous());
      names.push_back("experts." + std::to_string(e) + "." + projection + ".weight");
      writer.add(names.back(), file_dtype(type), {F, C}, values.back().data_ptr(), values.back().nbytes());
    }
  }
  writer.write(dir / "model.safetensors");
  auto weights = std::make_shared<HfWeightSource>("hf:" + dir.string());
  const size_t f = weights->add_file(SafetensorsFile::open(dir / "model.safetensors"));
  std::vector<std::vector<HfWeightSource::Piece>> rows(static_cast<size_t>(E));
  for (size_t i = 0; i < names.size(); ++i) rows[i / 2].push_back({f, *weights->file(f).find(names[i])});
  weights->add_stacked("gate_up", rows, {E, 2 * F, C});
  EXPECT_TRUE(weights->contains("gate_up"));
  EXPECT_EQ(weights->shapes().at("gate_up"), (std::vector<int64_t>{E, 2 * F, C}));

  std::vector<at::Tensor> converted;
  for (const at::Tensor& v : values) converted.push_back(v.to(at::kFloat));
  const at::Tensor whole = at::stack(converted).view({E, 2 * F, C}).contiguous();
  ParamSpec spec;
  spec.name = "gate_up";
  spec.shape = {E, 2 * F, C};
  const ParamInit init(0, std::shared_ptr<const model::WeightSource>(weights));
  const int64_t n = whole.numel();
  for (int64_t begin = 0; begin < n; begin += 11) {
    for (int64_t count : {int64_t{1}, int64_t{F * C + 3}, n - begin}) {
      if (begin + count > n) continue;
      const uint64_t before = weights->bytes_read();
      std::vector<float> got(static_cast<size_t>(count), -1.0f);
      init.fill(spec, begin, count, got.data());
      ASSERT_TRUE(same_bits(got.data(), whole.const_data_ptr<float>() + begin, count))
          << "[" << begin << ", " << begin + count << ")";
      // Expert 1's pieces are bf16: 2 bytes an element, the others 4.
      uint64_t expected = 0;
      for (int64_t k = begin; k < begin + count; ++k) expected += (k / (2 * F * C)) == 1 ? 2 : 4;
      EXPECT_EQ(weights->bytes_read() - before, expected) << "[" << begin << ", " << begin + count << ")";
    }
  }
  EXPECT_THROW(weights->add_stacked("short", rows, {E, 2 * F + 1, C}), std::logic_error);
  fs::remove_all(dir);
}

// Phi-3's fused projections (issue 51): a parameter that is a band of rows
// of one stored tensor holds exactly those rows, converted, and a slice of
// it reads only its own bytes.
TEST_F(HfWeightSourceTest, ABandOfRowsOfAFusedTensorIsThatBandAndReadsOnlyItself) {
  auto weights = std::make_shared<HfWeightSource>("hf:" + dir_.string());
  const size_t f = weights->add_file(SafetensorsFile::open(dir_ / "model.safetensors"));
  const size_t b = 2;  // "b": bf16 [9, 11], split 4 + 2 + 3 rows as q, k, v
  const std::vector<std::pair<int64_t, int64_t>> bands = {{0, 4}, {4, 2}, {6, 3}};
  for (size_t part = 0; part < bands.size(); ++part) {
    weights->add_rows("part" + std::to_string(part), f, *weights->file(f).find("b"), bands[part].first,
                      {bands[part].second, 11});
  }
  const ParamInit init(0, std::shared_ptr<const model::WeightSource>(weights));
  for (size_t part = 0; part < bands.size(); ++part) {
    const auto [row0, rows] = bands[part];
    const at::Tensor ref = whole(b).narrow(0, row0, rows).contiguous();
    ParamSpec s;
    s.name = "part" + std::to_string(part);
    s.shape = {rows, 11};
    std::vector<float> got(static_cast<size_t>(rows * 11), -1.0f);
    const uint64_t before = weights->bytes_read();
    init.fill(s, 0, rows * 11, got.data());
    EXPECT_TRUE(same_bits(got.data(), ref.const_data_ptr<float>(), rows * 11)) << s.name;
    EXPECT_EQ(weights->bytes_read() - before, static_cast<uint64_t>(rows * 11 * element_bytes(b))) << s.name;
    std::vector<float> one(3, -1.0f);  // a slice inside the band: row 1's columns 2..4 when it has one
    if (rows > 1) {
      init.fill(s, 11 + 2, 3, one.data());
      EXPECT_TRUE(same_bits(one.data(), ref.const_data_ptr<float>() + 13, 3)) << s.name;
    }
  }
  EXPECT_THROW(weights->add_rows("past", f, *weights->file(f).find("b"), 7, {3, 11}), std::logic_error);
}
