// TFRecord framing (see tfrecord.h).
#include "host/util/tfrecord.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace accel::tfrecord {
namespace {

// Reflected CRC-32C polynomial.
constexpr uint32_t kCastagnoli = 0x82F63B78u;
// TensorFlow's mask: rotate right by 15, add a constant.
constexpr uint32_t kMaskDelta = 0xa282ead8u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kCastagnoli : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

std::runtime_error write_error(const std::string& path, int error) {
  return std::runtime_error("cannot write '" + path + "': " + std::strerror(error));
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t crc = 0xffffffffu;
  for (const char c : bytes) crc = (crc >> 8) ^ kTable[(crc ^ static_cast<uint8_t>(c)) & 0xffu];
  return crc ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string frame(std::string_view payload) {
  std::string length;
  put_le(length, payload.size(), 8);
  std::string out = length;
  put_le(out, masked_crc32c(length), 4);
  out.append(payload);
  put_le(out, masked_crc32c(payload), 4);
  return out;
}

TfRecordWriter::TfRecordWriter(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw write_error(path, errno);
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int error = errno;
    ::close(fd);
    throw write_error(path, error);
  }
}

TfRecordWriter::~TfRecordWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TfRecordWriter::append(std::string_view payload) {
  const std::string record = frame(payload);
  errno = 0;
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    throw write_error(path_, errno != 0 ? errno : EIO);
  }
}

}  // namespace accel::tfrecord
