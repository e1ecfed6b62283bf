// Header validation: one test per rule of docs/checkpoint_format.md, each
// checking that a hand-made bad file is rejected with a message that names
// the file and the problem on one line; the headers the reference accepts
// and we must too; the fuzz seed corpus; and a deterministic mutation sweep
// that runs in every build (the libFuzzer target needs clang).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "host/checkpoint/safetensors.h"

namespace accel::checkpoint {
namespace {
namespace fs = std::filesystem;

std::string le64(uint64_t value) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &value, 8);
  return out;
}

// A file whose first 8 bytes give the true JSON length.
std::string file_bytes(const std::string& json, const std::string& data = "") {
  return le64(json.size()) + json + data;
}

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("accel_stv_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `bytes` to a file and opens it: "" if it opened, else the error.
  std::string open_error(const std::string& bytes) {
    const fs::path path = dir_ / "case.safetensors";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      SafetensorsFile::open(path);
      return "";
    } catch (const CheckpointError& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << "message must name the file";
      EXPECT_EQ(message.find('\n'), std::string::npos) << "message must be one line";
      return message.substr(path.string().size() + 2);
    }
  }

  fs::path dir_;
};

#define EXPECT_REJECTED(bytes, fragment)                                            \
  do {                                                                               \
    const std::string problem = open_error(bytes);                                   \
    EXPECT_NE(problem, "") << "accepted: " << (fragment);                            \
    EXPECT_NE(problem.find(fragment), std::string::npos) << "message: " << problem; \
  } while (0)

const std::string kOneF32 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(ValidationTest, AcceptsAWellFormedFile) {
  EXPECT_EQ(open_error(file_bytes(kOneF32, std::string(8, 'x'))), "");
}

TEST_F(ValidationTest, RejectsFileShorterThanTheLengthField) {
  EXPECT_REJECTED("", "file has 0 bytes, fewer than the 8-byte header length");
  EXPECT_REJECTED(std::string(7, '\0'), "file has 7 bytes");
}

TEST_F(ValidationTest, RejectsHeaderLengthAboveTheCap) {
  EXPECT_REJECTED(le64(100'000'001) + "{}",
                  "header length 100000001 exceeds the limit of 100000000 bytes");
  EXPECT_REJECTED(le64(UINT64_MAX) + "{}", "exceeds the limit");
}

TEST_F(ValidationTest, RejectsHeaderLengthPastTheEndOfFile) {
  EXPECT_REJECTED(le64(1000) + "{}      ", "header length 1000 runs past the end of the 16-byte");
}

TEST_F(ValidationTest, RejectsTruncatedData) {
  const std::string whole = file_bytes(kOneF32, std::string(8, 'x'));
  EXPECT_REJECTED(whole.substr(0, whole.size() - 1),
                  "tensor 'a': data_offsets [0, 8] run past the data section of 7 bytes");
  EXPECT_REJECTED(whole.substr(0, 8 + kOneF32.size()), "run past the data section of 0 bytes");
  EXPECT_REJECTED(whole.substr(0, 20), "runs past the end");  // cut inside the header
}

TEST_F(ValidationTest, RejectsBadJson) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"F32",)"), "header is not valid JSON");
  EXPECT_REJECTED(file_bytes(R"({"a":1} trailing)"), "header is not valid JSON");
  EXPECT_REJECTED(file_bytes("{\"a\xff\":1}"), "header is not valid JSON");  // not UTF-8
  EXPECT_REJECTED(file_bytes(""), "header is not a JSON object");
  EXPECT_REJECTED(file_bytes("[1,2]"), "header is not a JSON object (it starts with '[1,2]')");
  EXPECT_REJECTED(file_bytes("\xef\xbb\xbf{}"), "header is not a JSON object");  // BOM
}

TEST_F(ValidationTest, RejectsNulBytesWhichNlohmannWouldTreatAsEndOfInput) {
  EXPECT_REJECTED(file_bytes(std::string("{}\0\0\0\0\0\0", 8)), "header contains a NUL byte at offset 10");
}

TEST_F(ValidationTest, RejectsUnknownDtype) {
  // F4 and F6 are reference dtypes smaller than a byte; we do not write or read them.
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", "x"),
                  "unsupported dtype 'F4'");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", "x"),
                  "tensor 'a': unsupported dtype 'Q8'");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                  "unsupported dtype 'f32'");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                  "\"dtype\" is not a string");
}

TEST_F(ValidationTest, RejectsMalformedShape) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})"),
                  "each \"shape\" dimension must be a non-negative integer, got -1");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", "x"),
                  "non-negative integer, got 1.0");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":2,"data_offsets":[0,2]}})", "xx"),
                  "\"shape\" is not an array");
  EXPECT_REJECTED(
      file_bytes(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})"),
      "shape dimension 9223372036854775808 is too large");
}

TEST_F(ValidationTest, RejectsMissingFields) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", "x"),
                  "tensor 'a': missing \"dtype\"");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", "x"),
                  "missing \"shape\"");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[1]}})", "x"),
                  "missing \"data_offsets\"");
  EXPECT_REJECTED(file_bytes(R"({"a":[1,2]})"), "tensor 'a': entry is not a JSON object");
}

TEST_F(ValidationTest, RejectsMalformedOffsets) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "x"),
                  "\"data_offsets\" must be an array [begin, end]");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,-1]}})", "x"),
                  "data_offsets end must be a non-negative integer");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}})", "x"),
                  "tensor 'a': data_offsets [1, 0] end before begin");
}

TEST_F(ValidationTest, RejectsSizeThatDisagreesWithShapeAndDtype) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx"),
                  "tensor 'a': data_offsets [0, 4] span 4 bytes but shape [2] of F32 needs 8");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"BF16","shape":[],"data_offsets":[0,4]}})", "xxxx"),
                  "shape [] of BF16 needs 2");
}

TEST_F(ValidationTest, RejectsShapeWhoseByteCountOverflows) {
  EXPECT_REJECTED(
      file_bytes(
          R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      "overflows 64-bit byte count");
  EXPECT_REJECTED(  // numel fits, numel * 8 does not
      file_bytes(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
      "overflows 64-bit byte count");
}

TEST_F(ValidationTest, RejectsOverlappingOffsets) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                             std::string(12, 'x')),
                  "tensor 'b' starts at 4, overlapping 'a' which ends at 8");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                             std::string(8, 'x')),
                  "overlapping");  // two names for the same bytes
}

TEST_F(ValidationTest, RejectsHoles) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
                             std::string(12, 'x')),
                  "data bytes [4, 8) belong to no tensor (hole before 'b')");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                             std::string(8, 'x')),
                  "data bytes [0, 4) belong to no tensor");
}

TEST_F(ValidationTest, RejectsTrailingBytesAfterTheLastTensor) {
  EXPECT_REJECTED(file_bytes(kOneF32, std::string(9, 'x')),
                  "data section has 9 bytes but the tensors cover 8");
  EXPECT_REJECTED(file_bytes("{}", "x"), "data section has 1 bytes but the tensors cover 0");
}

TEST_F(ValidationTest, RejectsOffsetsBeyondTheFile) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})",
                             std::string(8, 'x')),
                  "data_offsets [0, 16] run past the data section of 8 bytes");
  EXPECT_REJECTED(
      file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,)"
                 R"(18446744073709551615]}})"),
      "run past the data section");
}

TEST_F(ValidationTest, RejectsDuplicateNamesAndFields) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                             R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                             "x"),
                  "duplicate tensor name 'a'");
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","dtype":"F32","shape":[1],)"
                             R"("data_offsets":[0,1]}})",
                             "x"),
                  "duplicate key 'dtype' inside a header entry");
  EXPECT_REJECTED(file_bytes(R"({"__metadata__":{"k":"1"},"__metadata__":{"k":"2"}})"),
                  "duplicate tensor name '__metadata__'");
}

TEST_F(ValidationTest, RejectsMetadataThatIsNotAStringMap) {
  EXPECT_REJECTED(file_bytes(R"({"__metadata__":{"step":1}})"),
                  "\"__metadata__\" value for key 'step' is not a string");
  EXPECT_REJECTED(file_bytes(R"({"__metadata__":{"a":{"b":"c"}}})"),
                  "\"__metadata__\" value for key 'a' is not a string");
  EXPECT_REJECTED(file_bytes(R"({"__metadata__":["a"]})"), "\"__metadata__\" is not a JSON object");
  EXPECT_REJECTED(file_bytes(R"({"__metadata__":"a"})"), "\"__metadata__\" is not a JSON object");
}

TEST_F(ValidationTest, RejectsNestingDeeperThanAHeader) {
  EXPECT_REJECTED(file_bytes(R"({"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", "x"),
                  "nests deeper than a safetensors header");
  EXPECT_REJECTED(file_bytes(std::string(100000, '[')), "header is not a JSON object");
  EXPECT_REJECTED(file_bytes("{\"a\":" + std::string(100000, '[')), "nests deeper");
}

TEST_F(ValidationTest, EscapesHostileNamesInMessages) {
  const std::string problem =
      open_error(file_bytes("{\"line\\nbreak\\u0007\":{\"dtype\":\"Q\",\"shape\":[],"
                            "\"data_offsets\":[0,0]}}"));
  EXPECT_NE(problem.find("tensor 'line\\x0abreak\\x07': unsupported dtype 'Q'"), std::string::npos)
      << problem;
}

// What the reference accepts, we accept.
TEST_F(ValidationTest, AcceptsWhatTheReferenceAccepts) {
  // Entries in any order in the JSON; extra fields ignored; null metadata;
  // whitespace around the object; zero-element tensors anywhere.
  const std::string json =
      "  \n{\"__metadata__\":null,"
      R"("c":{"dtype":"U8","shape":[0],"data_offsets":[6,6]},)"
      R"("b":{"dtype":"I16","shape":[1],"data_offsets":[4,6],"extra":[1,2]},)"
      R"("z":{"dtype":"U8","shape":[0,5],"data_offsets":[0,0]},)"
      R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}} )";
  const std::string bytes = file_bytes(json, "abcdef");
  ASSERT_EQ(open_error(bytes), "");
  const SafetensorsHeader header = parse_safetensors_header(bytes, bytes.size());
  ASSERT_EQ(header.tensors.size(), 4u);
  EXPECT_EQ(header.tensors[0].name, "z");  // file order = ascending (begin, end)
  EXPECT_EQ(header.tensors[1].name, "a");
  EXPECT_EQ(header.tensors[2].name, "b");
  EXPECT_EQ(header.tensors[3].name, "c");
  EXPECT_TRUE(header.metadata.empty());
  EXPECT_EQ(header.data_section_offset(), 8 + json.size());
}

TEST(ParseHeaderFromMemoryTest, NeedsTheWholeHeaderInThePrefix) {
  const std::string bytes = file_bytes(kOneF32, std::string(8, 'x'));
  EXPECT_NO_THROW(parse_safetensors_header(bytes, bytes.size()));
  try {
    parse_safetensors_header(std::string_view(bytes).substr(0, 8), bytes.size(), "shard0");
    FAIL();
  } catch (const CheckpointError& error) {
    EXPECT_EQ(std::string(error.what()).rfind("shard0: given only 8 bytes; the header needs", 0),
              0u)
        << error.what();
  }
  EXPECT_THROW(parse_safetensors_header(bytes, bytes.size() - 1), CheckpointError);
}

// ---------------------------------------------------------------------------
// Seed corpus and mutation sweep
// ---------------------------------------------------------------------------

TEST(SafetensorsCorpusTest, ValidSeedsParseAndInvalidSeedsAreRejected) {
  const fs::path corpus = ACCEL_SAFETENSORS_CORPUS_DIR;
  int valid = 0, invalid = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::string name = entry.path().filename().string();
    if (name.rfind("valid_", 0) == 0) {
      ++valid;
      EXPECT_NO_THROW(parse_safetensors_header(bytes, bytes.size(), name)) << name;
    } else if (name.rfind("invalid_", 0) == 0) {
      ++invalid;
      EXPECT_THROW(parse_safetensors_header(bytes, bytes.size(), name), CheckpointError) << name;
    }
  }
  EXPECT_GE(valid, 3);
  EXPECT_GE(invalid, 3);
}

// The invariants every accepted header must satisfy, whatever its bytes.
void expect_header_invariants(const SafetensorsHeader& header, uint64_t file_size) {
  uint64_t covered = 0;
  for (const TensorInfo& tensor : header.tensors) {
    ASSERT_EQ(tensor.data_begin, covered);
    ASSERT_EQ(tensor.nbytes(), tensor.numel() * dtype_size(tensor.dtype));
    covered = tensor.data_end;
  }
  ASSERT_EQ(header.data_section_offset() + covered, file_size);
}

TEST(SafetensorsMutationTest, RandomMutationsOnlyEverThrowCheckpointError) {
  const std::string seed =
      file_bytes(R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"U8","shape":[0],"data_offsets":[8,8]},)"
                 R"("c":{"dtype":"I16","shape":[1,1],"data_offsets":[8,10]}})",
                 std::string(10, 'd'));
  std::mt19937 rng(12345);
  const char kInteresting[] = {'0', '9', '-', '"', '{', '}', '[', ']', ',', ':', ' ', '\0', '\xff'};
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bytes = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0: bytes[at] = static_cast<char>(rng()); break;
        case 1: bytes[at] = kInteresting[rng() % sizeof(kInteresting)]; break;
        case 2: bytes.erase(at, 1 + rng() % 4); break;
        default: bytes.insert(at, 1, kInteresting[rng() % sizeof(kInteresting)]); break;
      }
      if (bytes.empty()) bytes = "x";
    }
    try {
      const SafetensorsHeader header = parse_safetensors_header(bytes, bytes.size());
      ++accepted;
      expect_header_invariants(header, bytes.size());
    } catch (const CheckpointError&) {
    }
  }
  EXPECT_GT(accepted, 0);  // the sweep does reach the accepting paths
}

}  // namespace
}  // namespace accel::checkpoint
