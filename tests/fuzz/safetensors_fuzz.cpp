// libFuzzer target for the safetensors header validator. The input is a
// whole file. Properties checked on every input:
//   1. parse_safetensors_header throws CheckpointError or nothing (any other
//      exception escapes and libFuzzer reports it as a crash);
//   2. an accepted header tiles the data section exactly with tensors whose
//      byte counts equal numel * dtype_size;
//   3. re-encoding an accepted header with SafetensorsWriter and parsing it
//      again gives the same tensors and metadata (writer and reader agree).
// Build: clang with -DACCEL_FUZZ=ON (tests/fuzz/CMakeLists.txt); run:
//   ./safetensors_fuzz -max_total_time=60 tests/fuzz/corpus_safetensors
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "host/checkpoint/safetensors.h"

namespace {

using accel::checkpoint::CheckpointError;
using accel::checkpoint::SafetensorsHeader;
using accel::checkpoint::SafetensorsWriter;
using accel::checkpoint::TensorInfo;

void require(bool condition) {
  if (!condition) std::abort();
}

void check_tiles_data_section(const SafetensorsHeader& header, uint64_t file_size) {
  uint64_t covered = 0;
  for (const TensorInfo& tensor : header.tensors) {
    require(tensor.data_begin == covered);
    require(tensor.data_end >= tensor.data_begin);
    require(tensor.nbytes() == tensor.numel() * accel::checkpoint::dtype_size(tensor.dtype));
    covered = tensor.data_end;
  }
  require(header.data_section_offset() + covered == file_size);
}

void check_reencodes_identically(const SafetensorsHeader& header, std::string_view file) {
  SafetensorsWriter writer;
  for (const TensorInfo& tensor : header.tensors) {
    const char* data = file.data() + header.data_section_offset() + tensor.data_begin;
    writer.add(tensor.name, tensor.dtype, tensor.shape, data, tensor.nbytes());
  }
  for (const auto& [key, value] : header.metadata) writer.set_metadata(key, value);
  std::string rewritten = writer.header_bytes();
  rewritten.append(file.substr(header.data_section_offset()));
  const SafetensorsHeader again =
      accel::checkpoint::parse_safetensors_header(rewritten, rewritten.size(), "re-encoded");
  require(again.metadata == header.metadata);
  require(again.tensors.size() == header.tensors.size());
  for (size_t i = 0; i < again.tensors.size(); ++i) {
    const TensorInfo& a = again.tensors[i];
    const TensorInfo& b = header.tensors[i];
    require(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
            a.data_begin == b.data_begin && a.data_end == b.data_end);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  SafetensorsHeader header;
  try {
    header = accel::checkpoint::parse_safetensors_header(file, size, "fuzz");
  } catch (const CheckpointError&) {
    return 0;
  }
  check_tiles_data_section(header, size);
  check_reencodes_identically(header, file);
  return 0;
}
