// Whole files from one rank to another over a Communicator's host
// point-to-point operations: how a node-local checkpoint's files reach a
// rank on another node (a snapshot's replicas while training, the missing
// files of an assembly at start; checkpoint/node_copies.h).
//
// Wire format, on one tag: an int64 length, a header of that many bytes
// ("<size> <name>\n" per file, or "error <message>" when the sender could
// not open its files), then each file's bytes in chunks of at most
// kFileChunkBytes. The sender maps its files and posts every send before
// waiting on any, so two ranks that send to each other and then receive
// never wait on each other; the receiver takes one chunk at a time into a
// bounded buffer. Every wait has the communicator's deadline.
//
// Thread-safety: as Communicator (one issuing thread per communicator); a
// communicator used here by a background thread is that thread's alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "host/comm/communicator.h"

namespace accel::comm {

inline constexpr int64_t kFileChunkBytes = int64_t{64} << 20;

// `files` (each received under its plain file name) on their way to
// `peer`: the constructor maps them and posts every send, wait() returns
// once every byte is sent. When a file cannot be opened, the error is sent
// instead (so the peer fails at once rather than by its deadline) and wait()
// throws it. wait() throws CommError when a send fails or times out. The
// files must not change until wait() returns.
class FileSend {
 public:
  FileSend(Communicator& comm, int peer, int tag, const std::vector<std::filesystem::path>& files);
  ~FileSend();
  FileSend(const FileSend&) = delete;
  FileSend& operator=(const FileSend&) = delete;

  void wait();

 private:
  struct Mapped;
  std::vector<std::unique_ptr<Mapped>> mapped_;
  int64_t length_ = 0;
  std::string header_;
  std::string error_;
  std::vector<std::shared_ptr<Work>> sends_;
};

// FileSend then wait().
void send_files(Communicator& comm, int peer, int tag, const std::vector<std::filesystem::path>& files);

// A file as receive_files got it: its plain name, its size and the zlib
// crc32 of the bytes received, computed as they arrived (the receiver need
// not read the file back to check it).
struct ReceivedFile {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

// Receives what `peer`'s send_files sent, writing each file into `dir`
// (created, truncated); with an empty `dir` the bytes are read and
// dropped. Returns the files in the order sent. Throws
// CommError when the transfer fails, times out, or the sender reported an
// error or sent a name that is not a plain file name, and (once every byte
// is received, so the sender is never left waiting) when a file could not be
// written; a file half-written then is left for the caller to discard.
std::vector<ReceivedFile> receive_files(Communicator& comm, int peer, int tag, const std::filesystem::path& dir);

}  // namespace accel::comm
