// Safetensors reader and writer of our own (no LibTorch): the leaf format of
// every Accel checkpoint. The reader validates a header the way the reference
// implementation (huggingface/safetensors, safetensors/src/tensor.rs) does and
// never trusts a byte of the file: after SafetensorsFile::open succeeds, every
// TensorInfo it hands out lies inside the file, the tensors tile the data
// section exactly, and numel * dtype_size == data_end - data_begin.
// The writer produces files the Python `safetensors` package opens.
// The on-disk format and each validation rule are written down in
// docs/checkpoint_format.md.
//
// Thread-safety: a SafetensorsFile is immutable after open(); read() uses
// pread() and may be called from many threads at once. A SafetensorsWriter is
// not synchronised: fill it and write it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace accel::checkpoint {

// Every failure of checkpoint I/O: one line that names the file (or the
// tensor / checkpoint directory) and the problem.
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------

// The safetensors dtypes we read and write. U32 and U64 come after the list
// the trainer asked for so that files written by other tools still open.
enum class DType : uint8_t {
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, U16, BOOL, U32, U64
};

size_t dtype_size(DType dtype);             // bytes per element
std::string_view dtype_name(DType dtype);   // safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::optional<DType> dtype_from_name(std::string_view name);  // nullopt for unknown spellings

// Largest header the reader accepts, as in the reference implementation.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Where one tensor's bytes are. Offsets are relative to the data section,
// which starts at SafetensorsHeader::data_section_offset() in the file.
struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // empty shape = scalar (one element)
  uint64_t data_begin;
  uint64_t data_end;

  uint64_t nbytes() const { return data_end - data_begin; }
  uint64_t numel() const;  // product of shape; 1 for a scalar, 0 if any dim is 0
};

// The validated header of one file. tensors are in file order (ascending
// data_begin), which is the order the writer was given them.
struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N, the JSON length stored in the first 8 bytes
  uint64_t file_size = 0;     // == data_section_offset() + the last tensor's data_end
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // the "__metadata__" map

  uint64_t data_section_offset() const { return 8 + header_bytes; }
  uint64_t data_section_bytes() const { return file_size - data_section_offset(); }
};

// Validates the header of a safetensors file from memory. `file_prefix` holds
// the first bytes of the file: at least 8 + N of them for the header to be
// checked (the whole file is fine); `file_size` is the size of the whole file.
// `source` names the file in error messages. Throws CheckpointError and
// nothing else, whatever the bytes; this is the function the fuzzer drives.
SafetensorsHeader parse_safetensors_header(std::string_view file_prefix, uint64_t file_size,
                                           std::string_view source = "<memory>");

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

// Collects tensors, then writes one file: 8-byte little-endian N, the JSON
// header padded with spaces to a multiple of 8 bytes (as the reference
// does), then each tensor's raw bytes back to back in the order add() saw
// them. Data is written as given: the caller supplies little-endian bytes.
class SafetensorsWriter {
 public:
  // Records a tensor. The writer does NOT copy: `data` must stay valid and
  // unchanged until write() returns (a checkpoint is often most of host
  // memory; a copy would double it). nbytes must equal numel * dtype_size.
  // Throws CheckpointError on a duplicate or reserved name, a negative
  // dimension, or a size mismatch.
  void add(std::string name, DType dtype, std::vector<int64_t> shape, const void* data,
           size_t nbytes);

  // One entry of the "__metadata__" string map; a repeated key overwrites.
  void set_metadata(std::string key, std::string value);

  // The exact bytes that precede the data section: N followed by the padded
  // JSON. Throws CheckpointError if a name is not valid UTF-8.
  std::string header_bytes() const;

  // Total file size write() will produce.
  uint64_t file_size() const;

  // What write() wrote: its length and the zlib crc32 of its bytes,
  // computed as they were written, so a checkpoint's manifest needs no
  // read-back.
  struct Written {
    uint64_t size = 0;
    uint32_t crc32 = 0;
  };

  // Creates or truncates `path`, writes the file and fsyncs it; returns
  // what it wrote.
  // On failure the partial file is removed and CheckpointError names the
  // path. A plain write is not atomic; PendingCheckpointDir (atomic_dir.h)
  // makes a whole checkpoint directory appear at once.
  Written write(const std::filesystem::path& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t nbytes;
  };
  std::vector<PendingTensor> tensors_;
  std::map<std::string, std::string, std::less<>> metadata_;
  std::map<std::string, size_t, std::less<>> index_of_name_;
  uint64_t data_bytes_ = 0;  // sum of nbytes, checked for overflow in add()
};

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

// A validated, read-only view of one file. Holds the file descriptor open;
// move-only.
class SafetensorsFile {
 public:
  // Opens and fully validates the header (parse_safetensors_header against
  // the real file size). Throws CheckpointError naming the path and the
  // problem.
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // Reads the whole tensor; dst_bytes must equal info.nbytes().
  void read(const TensorInfo& info, void* dst, size_t dst_bytes) const;

  // Reads `nbytes` bytes starting `offset_in_tensor` bytes into the tensor:
  // a row range of a shard when resharding on load.
  void read_bytes(const TensorInfo& info, uint64_t offset_in_tensor, void* dst,
                  size_t nbytes) const;

  // Reads `runs` byte ranges of `run_bytes` each, the first `offset_in_tensor`
  // bytes into the tensor and each next one `stride_bytes` after the one
  // before, back to back into dst (runs * run_bytes bytes): a block of rows
  // and columns of a row-major tensor, without the bytes between them (how a
  // rank reads only the slice of a weight it keeps). Runs that touch
  // (stride_bytes == run_bytes) are one read. Every range must lie inside
  // the tensor; throws CheckpointError naming the file and tensor otherwise.
  void read_strided(const TensorInfo& info, uint64_t offset_in_tensor, size_t run_bytes,
                    uint64_t stride_bytes, size_t runs, void* dst) const;

 private:
  SafetensorsFile(std::filesystem::path path, int fd, SafetensorsHeader header);

  std::filesystem::path path_;
  int fd_ = -1;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_of_name_;
};

}  // namespace accel::checkpoint
