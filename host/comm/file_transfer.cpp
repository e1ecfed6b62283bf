// Whole files between two ranks (see file_transfer.h).
#include "host/comm/file_transfer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>
#include <utility>

namespace accel::comm {
namespace {

namespace fs = std::filesystem;

// Header text and names are bounded: they come from a peer.
constexpr int64_t kMaxHeaderBytes = int64_t{1} << 20;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw CommError(code, message); }

void check(const Status& status) {
  if (!status.ok()) fail(status.code, status.message);
}

bool is_plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\n\0", 3)) == std::string::npos;
}

}  // namespace

// A file mapped for reading, unmapped and closed on destruction.
class FileSend::Mapped {
 public:
  explicit Mapped(const fs::path& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(ErrorCode::failed_precondition, "cannot open " + path.string() + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      fail(ErrorCode::failed_precondition, path.string() + " is not a regular file");
    }
    size_ = static_cast<int64_t>(st.st_size);
    if (size_ > 0) {
      data_ = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, fd_, 0);
      if (data_ == MAP_FAILED) {
        data_ = nullptr;
        fail(ErrorCode::failed_precondition, "cannot map " + path.string() + ": " + std::strerror(errno));
      }
    }
  }
  ~Mapped() {
    if (data_) ::munmap(data_, static_cast<size_t>(size_));
    if (fd_ >= 0) ::close(fd_);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;

  int64_t size() const { return size_; }
  char* data() const { return static_cast<char*>(data_); }

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  int64_t size_ = 0;
};

namespace {

void write_all(int fd, const char* data, int64_t bytes, const fs::path& path) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, static_cast<size_t>(bytes));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(ErrorCode::failed_precondition, "cannot write " + path.string() + ": " + std::strerror(errno));
    data += n;
    bytes -= n;
  }
}

}  // namespace

FileSend::FileSend(Communicator& comm, int peer, int tag, const std::vector<fs::path>& files) {
  try {
    for (const fs::path& file : files) {
      const std::string name = file.filename().string();
      if (!is_plain_name(name)) {
        fail(ErrorCode::invalid_argument, "cannot send " + file.string() + ": not a plain file name");
      }
      mapped_.push_back(std::make_unique<Mapped>(file));
      header_ += std::to_string(mapped_.back()->size()) + " " + name + "\n";
    }
  } catch (const CommError& e) {
    error_ = e.what();
    header_ = "error " + error_;
    mapped_.clear();
  }
  length_ = static_cast<int64_t>(header_.size());
  const OpOptions options{.label = "send files"};
  sends_.push_back(comm.send_async(host_buffer(&length_, 1, DType::i64), peer, tag, options));
  sends_.push_back(comm.send_async(host_buffer(header_.data(), length_, DType::u8), peer, tag, options));
  for (const auto& file : mapped_) {
    for (int64_t offset = 0; offset < file->size(); offset += kFileChunkBytes) {
      const int64_t bytes = std::min(kFileChunkBytes, file->size() - offset);
      sends_.push_back(comm.send_async(host_buffer(file->data() + offset, bytes, DType::u8), peer, tag, options));
    }
  }
}

// A send still pending is waited for (its buffers are ours); its failure
// was the caller's to see through wait().
FileSend::~FileSend() {
  for (const auto& send : sends_) send->wait();
}

void FileSend::wait() {
  for (const auto& send : sends_) check(send->wait());
  if (!error_.empty()) fail(ErrorCode::failed_precondition, error_);
}

void send_files(Communicator& comm, int peer, int tag, const std::vector<fs::path>& files) {
  FileSend(comm, peer, tag, files).wait();
}

std::vector<ReceivedFile> receive_files(Communicator& comm, int peer, int tag, const fs::path& dir) {
  const OpOptions options{.label = "receive files"};
  int64_t length = 0;
  check(comm.recv(host_buffer(&length, 1, DType::i64), peer, tag, options));
  if (length < 0 || length > kMaxHeaderBytes) {
    fail(ErrorCode::invalid_argument, "rank " + std::to_string(peer) + " announced a file list of " +
                                          std::to_string(length) + " bytes (limit " +
                                          std::to_string(kMaxHeaderBytes) + ")");
  }
  std::string header(static_cast<size_t>(length), '\0');
  check(comm.recv(host_buffer(header.data(), length, DType::u8), peer, tag, options));
  if (header.rfind("error ", 0) == 0) {
    fail(ErrorCode::failed_precondition,
         "rank " + std::to_string(peer) + " could not send its files: " + header.substr(6));
  }
  std::vector<std::pair<int64_t, std::string>> listed;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    char* end = nullptr;
    const long long size = space == std::string::npos ? -1 : std::strtoll(line.c_str(), &end, 10);
    const std::string name = space == std::string::npos ? std::string() : line.substr(space + 1);
    if (size < 0 || end != line.c_str() + space || !is_plain_name(name)) {
      fail(ErrorCode::invalid_argument, "rank " + std::to_string(peer) + " sent a malformed file list entry");
    }
    listed.emplace_back(size, name);
  }
  int64_t largest = 0;
  for (const auto& [size, name] : listed) largest = std::max(largest, size);
  std::vector<char> chunk(static_cast<size_t>(std::min(largest, kFileChunkBytes)));
  std::vector<ReceivedFile> received;
  // A file that cannot be written is still received to its end, and the
  // files after it, so the sender is never left waiting: the error is
  // thrown once the transfer is over.
  std::string write_error;
  for (const auto& [size, name] : listed) {
    const fs::path path = dir / name;
    int fd = -1;
    if (!dir.empty() && write_error.empty()) {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) write_error = "cannot create " + path.string() + ": " + std::strerror(errno);
    }
    uLong crc = ::crc32(0L, Z_NULL, 0);
    for (int64_t offset = 0; offset < size; offset += kFileChunkBytes) {
      const int64_t bytes = std::min(kFileChunkBytes, size - offset);
      check(comm.recv(host_buffer(chunk.data(), bytes, DType::u8), peer, tag, options));
      // bytes > 0 here: zlib restarts the crc when given a null buffer.
      crc = ::crc32_z(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<z_size_t>(bytes));
      if (fd < 0) continue;
      try {
        write_all(fd, chunk.data(), bytes, path);
      } catch (const CommError& e) {
        write_error = e.what();
        ::close(std::exchange(fd, -1));
      }
    }
    if (fd >= 0) ::close(fd);
    received.push_back(ReceivedFile{name, static_cast<uint64_t>(size), static_cast<uint32_t>(crc)});
  }
  if (!write_error.empty()) fail(ErrorCode::failed_precondition, write_error);
  return received;
}

}  // namespace accel::comm
