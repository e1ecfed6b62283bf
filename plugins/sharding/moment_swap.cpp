// moment_swap.cpp — the AdamW moments of swapped units in a file, through a
// few host buffers and one I/O thread (see moment_swap.h).
#include "moment_swap.h"

#include <accel/sdk/error.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>

namespace accel::sharding {
namespace {

using sdk::Error;

std::string system_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// pread/pwrite until all `bytes` moved (both may move less per call).
void transfer(bool reading, int fd, char* data, int64_t bytes, int64_t offset, const std::string& what) {
  while (bytes > 0) {
    const ssize_t n = reading ? ::pread(fd, data, static_cast<size_t>(bytes), offset)
                              : ::pwrite(fd, data, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ACCEL_ERROR_INTERNAL, system_error(what));
    if (n == 0) throw Error(ACCEL_ERROR_INTERNAL, what + ": the file ended early");
    data += n;
    bytes -= n;
    offset += n;
  }
}

}  // namespace

int64_t MomentSwap::slot_elements(const std::vector<int64_t>& numel, int64_t piece_elements) {
  int64_t largest = 0;
  for (const int64_t n : numel) largest = std::max(largest, std::min(n, piece_elements));
  return largest;
}

MomentSwap::MomentSwap(const std::string& dir, int32_t rank, std::vector<int64_t> numel, int64_t piece_elements,
                       std::vector<float*> slots, bool with_masters)
    : arrays_(arrays(with_masters)), slots_(std::move(slots)) {
  if (slots_.size() < 2) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "the NVMe swap needs at least 2 buffers (one steps, one is read)");
  }
  if (piece_elements < 1) throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "the NVMe swap's pieces must hold an element");
  int64_t end = 0;
  for (size_t u = 0; u < numel.size(); ++u) {
    first_piece_.push_back(numel[u] > 0 ? pieces_.size() : SIZE_MAX);
    for (int64_t begin = 0; begin < numel[u]; begin += piece_elements) {
      Piece piece;
      piece.unit = static_cast<int32_t>(u);
      piece.begin = begin;
      piece.count = std::min(piece_elements, numel[u] - begin);
      piece.offset = end;
      end += piece_bytes(piece);
      pieces_.push_back(piece);
    }
  }
  std::string name = dir + "/accel_moments.rank" + std::to_string(rank) + ".XXXXXX";
  fd_ = ::mkstemp(name.data());
  if (fd_ < 0) throw Error(ACCEL_ERROR_INVALID_ARGUMENT, system_error("NVMe swap file in " + dir));
  path_ = name;
  ::unlink(name.c_str());  // gone when the process ends, however it ends
  io_ = std::thread([this] { io_loop(); });
}

MomentSwap::~MomentSwap() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  io_.join();  // the queue is drained first
  ::close(fd_);
}

bool MomentSwap::swapped(int32_t unit) const {
  return unit >= 0 && static_cast<size_t>(unit) < first_piece_.size() &&
         first_piece_[static_cast<size_t>(unit)] != SIZE_MAX;
}

MomentSwap::Traffic MomentSwap::take_traffic() { return std::exchange(traffic_, Traffic{}); }

std::future<void> MomentSwap::enqueue(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(task));
  }
  cv_.notify_one();
  return done;
}

void MomentSwap::io_loop() {
  for (;;) {
    std::packaged_task<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_, and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();  // an exception lands in the job's future
  }
}

void MomentSwap::move_piece(bool reading, const Piece& piece, float* slot) const {
  transfer(reading, fd_, reinterpret_cast<char*>(slot), piece_bytes(piece), piece.offset,
           "NVMe swap " + path_ + ": " + (reading ? "reading" : "writing") + " the moments of unit " +
               std::to_string(piece.unit));
}

void MomentSwap::read_masters(int32_t unit, float* into) {
  if (!holds_masters() || !swapped(unit)) throw Error(ACCEL_ERROR_INTERNAL, "the NVMe swap holds no masters of this unit");
  for (size_t p = first_piece_[static_cast<size_t>(unit)]; p < pieces_.size() && pieces_[p].unit == unit; ++p) {
    const Piece& piece = pieces_[p];
    const int64_t bytes = piece.count * static_cast<int64_t>(sizeof(float));
    if (!piece.written) {
      std::memset(into + piece.begin, 0, static_cast<size_t>(bytes));
      continue;
    }
    transfer(true, fd_, reinterpret_cast<char*>(into + piece.begin), bytes, piece.offset + 2 * bytes,
             "NVMe swap " + path_ + ": reading the masters of unit " + std::to_string(unit));
    traffic_.read += bytes;
  }
}

void MomentSwap::write_masters(int32_t unit, const float* from) {
  if (!holds_masters() || !swapped(unit)) throw Error(ACCEL_ERROR_INTERNAL, "the NVMe swap holds no masters of this unit");
  for (size_t p = first_piece_[static_cast<size_t>(unit)]; p < pieces_.size() && pieces_[p].unit == unit; ++p) {
    Piece& piece = pieces_[p];
    const int64_t bytes = piece.count * static_cast<int64_t>(sizeof(float));
    // A piece first written here keeps zero moments: the file's hole before
    // the master reads as zeros.
    transfer(false, fd_, reinterpret_cast<char*>(const_cast<float*>(from + piece.begin)), bytes,
             piece.offset + 2 * bytes, "NVMe swap " + path_ + ": writing the masters of unit " + std::to_string(unit));
    piece.written = true;
    traffic_.written += bytes;
  }
}

void MomentSwap::pass_all(bool write_back, const Visit& visit) {
  std::vector<int32_t> order(first_piece_.size());
  std::iota(order.begin(), order.end(), 0);
  pass(order, write_back, visit);
}

void MomentSwap::pass(const std::vector<int32_t>& order, bool write_back, const Visit& visit) {
  std::vector<Piece*> visits;
  for (const int32_t u : order) {
    if (!swapped(u)) continue;
    for (size_t p = first_piece_[static_cast<size_t>(u)]; p < pieces_.size() && pieces_[p].unit == u; ++p) {
      visits.push_back(&pieces_[p]);
    }
  }
  const size_t depth = slots_.size();
  std::vector<std::future<void>> reads(visits.size());
  std::vector<std::future<void>> writes;
  size_t next_read = 0;
  // Piece i uses slot i % depth. Up to depth-1 reads run ahead of the piece
  // being visited; the FIFO queue puts each read after the write of the
  // piece that last used its slot.
  const auto read_ahead = [&](size_t visiting) {
    for (; next_read < visits.size() && next_read < visiting + depth; ++next_read) {
      const Piece* piece = visits[next_read];
      float* slot = slots_[next_read % depth];
      if (piece->written) {
        reads[next_read] = enqueue([this, piece, slot] { move_piece(true, *piece, slot); });
        traffic_.read += piece_bytes(*piece);
      } else {
        const auto bytes = static_cast<size_t>(piece_bytes(*piece));
        reads[next_read] = enqueue([slot, bytes] { std::memset(slot, 0, bytes); });
      }
    }
  };
  // The first error wins; every queued job still completes before the
  // slots can be reused or the caller sees the error.
  const auto drain = [&] {
    std::exception_ptr first;
    const auto settle = [&first](std::future<void>& f) {
      if (!f.valid()) return;
      try {
        f.get();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    };
    for (auto& f : reads) settle(f);
    for (auto& f : writes) settle(f);
    if (first) std::rethrow_exception(first);
  };
  try {
    for (size_t i = 0; i < visits.size(); ++i) {
      read_ahead(i);  // pieces [i, i + depth): the slot of piece i-1 is refilled after its write
      reads[i].get();
      Piece* piece = visits[i];
      float* slot = slots_[i % depth];
      visit(piece->unit, piece->begin, piece->count, slot, slot + piece->count);
      if (write_back) {
        piece->written = true;
        writes.push_back(enqueue([this, piece, slot] { move_piece(false, *piece, slot); }));
        traffic_.written += piece_bytes(*piece);
      }
    }
  } catch (...) {
    try {
      drain();
    } catch (...) {
      // the first failure is rethrown below
    }
    throw;
  }
  drain();
}

}  // namespace accel::sharding
