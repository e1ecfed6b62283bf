// TFRecord files: the framing TensorBoard's event files use. Each record is
//   uint64 length, uint32 masked CRC-32C of the length, the bytes,
//   uint32 masked CRC-32C of the bytes
// all little-endian; "masked" is TensorFlow's rotate-and-add of the CRC
// (so a CRC of data that itself holds CRCs does not degenerate).
//
// Thread-safety: a TfRecordWriter is used by one thread; the free functions
// are pure.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace accel::tfrecord {

// CRC-32C (Castagnoli), as TFRecord and protobuf tooling compute it.
uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);

// One framed record: what append() writes for `payload`.
std::string frame(std::string_view payload);

// Appends framed records to a new file. Construction creates the file and
// fails if it exists (two writers never interleave records); every append is
// flushed, so a run that dies leaves whole records only, except possibly a
// torn last one, which readers skip. Throws std::runtime_error("cannot write
// 'PATH': <errno text>") on any I/O error.
class TfRecordWriter {
 public:
  explicit TfRecordWriter(const std::string& path);
  ~TfRecordWriter();
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  void append(std::string_view payload);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace accel::tfrecord
