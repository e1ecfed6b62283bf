// Round-trip tests for the safetensors writer and reader: every dtype,
// scalars and zero-element tensors, metadata, tensor order, partial reads,
// and byte-for-byte agreement with the reference implementation's own
// serialization tests (safetensors/src/tensor.rs: test_serialization,
// test_serialization_forced_alignement, test_empty). Header validation
// failures live in safetensors_validation_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "host/checkpoint/atomic_dir.h"  // describe_file
#include "host/checkpoint/safetensors.h"

namespace accel::checkpoint {
namespace {
namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("accel_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path dir_;
};

constexpr DType kAllDTypes[] = {DType::F64,     DType::F32,     DType::F16, DType::BF16,
                                DType::F8_E4M3, DType::F8_E5M2, DType::I64, DType::I32,
                                DType::I16,     DType::I8,      DType::U8,  DType::U16,
                                DType::BOOL,    DType::U32,     DType::U64};

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(seed * 31 + i * 7 + 1);
  return bytes;
}

std::vector<unsigned char> read_all(const SafetensorsFile& file, const TensorInfo& info) {
  std::vector<unsigned char> out(info.nbytes());
  file.read(info, out.data(), out.size());
  return out;
}

TEST(DTypeTest, SizesAndNamesMatchSafetensorsSpelling) {
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F8_E5M2), 1u);
  EXPECT_EQ(dtype_size(DType::BOOL), 1u);
  EXPECT_EQ(dtype_size(DType::U64), 8u);
  EXPECT_EQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_name(DType::BF16), "BF16");
  for (DType dtype : kAllDTypes) {
    ASSERT_EQ(dtype_from_name(dtype_name(dtype)), dtype) << dtype_name(dtype);
  }
  EXPECT_EQ(dtype_from_name("f32"), std::nullopt);  // spelling is case-sensitive
  EXPECT_EQ(dtype_from_name("F4"), std::nullopt);
}

TEST_F(SafetensorsTest, RoundTripsEveryDTypeWithScalarAndZeroElementTensors) {
  SafetensorsWriter writer;
  std::vector<std::vector<unsigned char>> keep_alive;
  std::vector<std::tuple<std::string, DType, std::vector<int64_t>>> expected;
  unsigned seed = 0;
  for (DType dtype : kAllDTypes) {
    const std::string base(dtype_name(dtype));
    const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {}, {0}, {4, 0, 2}, {5}};
    for (size_t s = 0; s < shapes.size(); ++s) {
      const std::string name = base + ".t" + std::to_string(s);
      size_t numel = 1;
      for (int64_t dim : shapes[s]) numel *= static_cast<size_t>(dim);
      keep_alive.push_back(pattern(numel * dtype_size(dtype), ++seed));
      writer.add(name, dtype, shapes[s], keep_alive.back().data(), keep_alive.back().size());
      expected.emplace_back(name, dtype, shapes[s]);
    }
  }
  const fs::path path = dir_ / "all.safetensors";
  const SafetensorsWriter::Written written = writer.write(path);
  EXPECT_EQ(fs::file_size(path), writer.file_size());
  // What the writer says it wrote is the file, read back.
  EXPECT_EQ(written.size, writer.file_size());
  EXPECT_EQ(written.crc32, describe_file(path).crc32);

  const SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.tensors().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, dtype, shape] = expected[i];
    const TensorInfo& info = file.tensors()[i];  // file order is add() order
    EXPECT_EQ(info.name, name);
    EXPECT_EQ(info.dtype, dtype) << name;
    EXPECT_EQ(info.shape, shape) << name;
    EXPECT_EQ(info.nbytes(), keep_alive[i].size()) << name;
    EXPECT_EQ(read_all(file, info), keep_alive[i]) << name;
    ASSERT_EQ(file.find(name), &info);
  }
  const TensorInfo* scalar = file.find("F32.t1");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->numel(), 1u);
  EXPECT_EQ(scalar->nbytes(), 4u);
  EXPECT_EQ(file.find("F32.t3")->numel(), 0u);
  EXPECT_EQ(file.find("no such tensor"), nullptr);
  EXPECT_TRUE(file.metadata().empty());
}

TEST_F(SafetensorsTest, FileOfOnlyZeroElementTensorsHasEmptyDataSection) {
  SafetensorsWriter writer;
  writer.add("a", DType::F32, {0}, nullptr, 0);
  writer.add("b", DType::I64, {3, 0}, nullptr, 0);
  const fs::path path = dir_ / "empty_data.safetensors";
  writer.write(path);
  const SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "a");  // equal offsets keep add() order
  EXPECT_EQ(file.tensors()[1].name, "b");
  EXPECT_EQ(file.header().data_section_bytes(), 0u);
  file.read(file.tensors()[1], nullptr, 0);
}

TEST_F(SafetensorsTest, MetadataRoundTripsIncludingCharactersJsonMustEscape) {
  SafetensorsWriter writer;
  const float value = 1.5f;
  writer.add("w", DType::F32, {}, &value, sizeof(value));
  writer.set_metadata("format", "pt");
  writer.set_metadata("step", "1200");
  writer.set_metadata("quote\"back\\slash", "line\nbreak\ttab \xc3\xa9");
  writer.set_metadata("step", "1300");  // overwrite
  writer.write(dir_ / "meta.safetensors");
  const SafetensorsFile file = SafetensorsFile::open(dir_ / "meta.safetensors");
  const std::map<std::string, std::string> expected = {
      {"format", "pt"}, {"step", "1300"}, {"quote\"back\\slash", "line\nbreak\ttab \xc3\xa9"}};
  EXPECT_EQ(file.metadata(), expected);
  float back = 0;
  file.read(*file.find("w"), &back, sizeof(back));
  EXPECT_EQ(back, value);
}

TEST_F(SafetensorsTest, HeaderIsPaddedWithSpacesToEightBytes) {
  for (std::string name : {"a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh"}) {
    SafetensorsWriter writer;
    const uint8_t byte = 7;
    writer.add(name, DType::U8, {1}, &byte, 1);
    const std::string header = writer.header_bytes();
    uint64_t n = 0;
    std::memcpy(&n, header.data(), 8);
    EXPECT_EQ(n % 8, 0u) << name;
    EXPECT_EQ(header.size(), 8 + n);
    EXPECT_EQ(header.find_first_not_of(' ', header.rfind('}') + 1), std::string::npos);
  }
}

// Expected bytes are the reference crate's own test vectors.
TEST_F(SafetensorsTest, MatchesReferenceSerializationByteForByte) {
  const float values[] = {0, 1, 2, 3, 4, 5};
  {
    SafetensorsWriter writer;
    writer.add("attn.0", DType::F32, {1, 2, 3}, values, sizeof(values));
    const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    ASSERT_EQ(json.size(), 64u);
    EXPECT_EQ(writer.header_bytes(), std::string("\x40\0\0\0\0\0\0\0", 8) + json);
    writer.write(dir_ / "ref.safetensors");
    EXPECT_EQ(slurp(dir_ / "ref.safetensors"),
              writer.header_bytes() + std::string(reinterpret_cast<const char*>(values), 24));
  }
  {
    SafetensorsWriter writer;  // forced alignment: 65-byte JSON + 7 spaces
    writer.add("attn0", DType::F32, {1, 1, 2, 3}, values, sizeof(values));
    EXPECT_EQ(writer.header_bytes(),
              std::string("\x48\0\0\0\0\0\0\0", 8) +
                  R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                  std::string(7, ' '));
  }
  {
    SafetensorsWriter writer;
    EXPECT_EQ(writer.header_bytes(), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
    writer.set_metadata("framework", "pt");
    EXPECT_EQ(writer.header_bytes(), std::string("\x28\0\0\0\0\0\0\0", 8) +
                                         R"({"__metadata__":{"framework":"pt"}})" +
                                         std::string(5, ' '));
  }
}

TEST_F(SafetensorsTest, EmptyFileRoundTrips) {
  SafetensorsWriter writer;
  writer.write(dir_ / "empty.safetensors");
  const SafetensorsFile file = SafetensorsFile::open(dir_ / "empty.safetensors");
  EXPECT_TRUE(file.tensors().empty());
  EXPECT_EQ(file.header().file_size, 16u);
}

TEST_F(SafetensorsTest, PartialReadsAndBufferSizeChecks) {
  std::vector<int32_t> values(12);
  for (int i = 0; i < 12; ++i) values[i] = i * 10;
  SafetensorsWriter writer;
  const uint8_t pad = 1;
  writer.add("pad", DType::U8, {1}, &pad, 1);  // data of "rows" starts at an odd offset
  writer.add("rows", DType::I32, {3, 4}, values.data(), values.size() * 4);
  writer.write(dir_ / "rows.safetensors");
  const SafetensorsFile file = SafetensorsFile::open(dir_ / "rows.safetensors");
  const TensorInfo& rows = *file.find("rows");

  int32_t row[4] = {};
  file.read_bytes(rows, 1 * 16, row, sizeof(row));  // second row
  EXPECT_EQ(row[0], 40);
  EXPECT_EQ(row[3], 70);

  int32_t too_small[11];
  try {
    file.read(rows, too_small, sizeof(too_small));
    FAIL() << "short destination accepted";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("rows.safetensors: tensor 'rows' has 48 bytes"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(file.read_bytes(rows, 40, row, 16), CheckpointError);
  EXPECT_THROW(file.read_bytes(rows, UINT64_MAX, row, 2), CheckpointError);

  TensorInfo foreign = rows;  // e.g. a TensorInfo from a bigger file
  foreign.data_end = 1 << 20;
  EXPECT_THROW(file.read_bytes(foreign, 0, row, 4), CheckpointError);
}

TEST_F(SafetensorsTest, StridedReadsTakeABlockOfRowsAndColumnsAndNothingOutsideTheTensor) {
  std::vector<int32_t> values(20);
  for (int i = 0; i < 20; ++i) values[i] = i;
  SafetensorsWriter writer;
  const uint8_t pad = 1;
  writer.add("pad", DType::U8, {1}, &pad, 1);
  writer.add("m", DType::I32, {4, 5}, values.data(), values.size() * 4);  // rows of 20 bytes
  writer.write(dir_ / "m.safetensors");
  const SafetensorsFile file = SafetensorsFile::open(dir_ / "m.safetensors");
  const TensorInfo& m = *file.find("m");

  int32_t block[6] = {};
  file.read_strided(m, (1 * 5 + 2) * 4, 2 * 4, 5 * 4, 3, block);  // rows 1..3, columns 2..3
  EXPECT_EQ(std::vector<int32_t>(block, block + 6), (std::vector<int32_t>{7, 8, 12, 13, 17, 18}));
  int32_t column[4] = {};
  file.read_strided(m, 4 * 4, 4, 5 * 4, 4, column);  // the last column
  EXPECT_EQ(std::vector<int32_t>(column, column + 4), (std::vector<int32_t>{4, 9, 14, 19}));
  int32_t rows[10] = {};
  file.read_strided(m, 2 * 5 * 4, 5 * 4, 5 * 4, 2, rows);  // touching runs: whole rows 2..3
  EXPECT_EQ(rows[0], 10);
  EXPECT_EQ(rows[9], 19);
  file.read_strided(m, 0, 4, 20, 0, rows);  // nothing asked, nothing read

  // The last run past the tensor, overlapping runs, a stride that overflows.
  EXPECT_THROW(file.read_strided(m, 4 * 4, 8, 5 * 4, 4, column), CheckpointError);
  EXPECT_THROW(file.read_strided(m, 0, 8, 4, 2, column), CheckpointError);
  EXPECT_THROW(file.read_strided(m, 0, 4, UINT64_MAX / 2, 3, column), CheckpointError);
  try {
    file.read_strided(m, 3 * 4, 4, 5 * 4, 5, column);
    FAIL() << "a run past the tensor's end was read";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("m.safetensors"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("'m'"), std::string::npos) << error.what();
  }
}

TEST_F(SafetensorsTest, ConcurrentReadsFromOneFile) {
  std::vector<std::vector<unsigned char>> data;
  SafetensorsWriter writer;
  for (int i = 0; i < 8; ++i) data.push_back(pattern(4096 + i, i));
  for (int i = 0; i < 8; ++i) {
    writer.add("t" + std::to_string(i), DType::U8, {static_cast<int64_t>(data[i].size())},
               data[i].data(), data[i].size());
  }
  writer.write(dir_ / "mt.safetensors");
  const SafetensorsFile file = SafetensorsFile::open(dir_ / "mt.safetensors");
  std::vector<int> ok(8, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 50; ++round) {
        ok[i] += read_all(file, file.tensors()[i]) == data[i];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ok[i], 50);
}

TEST_F(SafetensorsTest, MovedFileKeepsWorking) {
  const double value = 3.25;
  SafetensorsWriter writer;
  writer.add("x", DType::F64, {}, &value, 8);
  writer.write(dir_ / "x.safetensors");
  SafetensorsFile first = SafetensorsFile::open(dir_ / "x.safetensors");
  SafetensorsFile second = std::move(first);
  double back = 0;
  second.read(*second.find("x"), &back, 8);
  EXPECT_EQ(back, value);
  EXPECT_THROW(first.read(*second.find("x"), &back, 8), CheckpointError);  // NOLINT(use-after-move)
}

TEST_F(SafetensorsTest, WriterRejectsBadTensors) {
  SafetensorsWriter writer;
  const float values[4] = {};
  writer.add("ok", DType::F32, {4}, values, 16);
  EXPECT_THROW(writer.add("ok", DType::F32, {4}, values, 16), CheckpointError);
  EXPECT_THROW(writer.add("__metadata__", DType::F32, {4}, values, 16), CheckpointError);
  EXPECT_THROW(writer.add("size", DType::F32, {4}, values, 12), CheckpointError);
  EXPECT_THROW(writer.add("negative", DType::F32, {-4}, values, 16), CheckpointError);
  EXPECT_THROW(writer.add("overflow", DType::F64, {INT64_MAX, 4}, values, 16), CheckpointError);
  EXPECT_THROW(writer.add("null", DType::F32, {4}, nullptr, 16), CheckpointError);
  try {
    writer.add("size", DType::BF16, {3}, values, 4);
    FAIL();
  } catch (const CheckpointError& error) {
    EXPECT_STREQ(error.what(),
                 "safetensors writer: tensor 'size': shape [3] of BF16 needs 6 bytes, given 4");
  }
  // Nothing rejected was recorded.
  writer.write(dir_ / "ok.safetensors");
  EXPECT_EQ(SafetensorsFile::open(dir_ / "ok.safetensors").tensors().size(), 1u);
}

TEST_F(SafetensorsTest, WriteFailuresNameThePath) {
  SafetensorsWriter writer;
  const fs::path path = dir_ / "missing_dir" / "x.safetensors";
  try {
    writer.write(path);
    FAIL();
  } catch (const CheckpointError& error) {
    EXPECT_EQ(std::string(error.what()).rfind(path.string() + ": cannot create", 0), 0u)
        << error.what();
  }
  SafetensorsWriter bad_name;
  const uint8_t byte = 0;
  bad_name.add("bad\xff", DType::U8, {1}, &byte, 1);
  EXPECT_THROW(bad_name.write(dir_ / "bad.safetensors"), CheckpointError);
}

}  // namespace
}  // namespace accel::checkpoint
