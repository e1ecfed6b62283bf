// moment_swap.cpp — the AdamW moments of swapped units in a file, through a
// few host buffers and one I/O thread (see moment_swap.h).
#include "moment_swap.h"

#include <accel/sdk/error.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

MomentSwap::MomentSwap(const std::string& dir, int32_t rank, std::vector<int64_t> numel, std::vector<float*> slots)
    : numel_(std::move(numel)), written_(numel_.size(), false), slots_(std::move(slots)) {
  if (slots_.size() < 2) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "the NVMe swap needs at least 2 buffers (one steps, one is read)");
  }
  int64_t end = 0;
  for (const int64_t n : numel_) {
    offset_.push_back(end);
    end += 2 * n * static_cast<int64_t>(sizeof(float));
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
  return unit >= 0 && static_cast<size_t>(unit) < numel_.size() && numel_[static_cast<size_t>(unit)] > 0;
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

void MomentSwap::read_unit(int32_t unit, float* slot) {
  const auto u = static_cast<size_t>(unit);
  transfer(true, fd_, reinterpret_cast<char*>(slot), 2 * numel_[u] * static_cast<int64_t>(sizeof(float)), offset_[u],
           "NVMe swap " + path_ + ": reading the moments of unit " + std::to_string(unit));
}

void MomentSwap::write_unit(int32_t unit, const float* slot) {
  const auto u = static_cast<size_t>(unit);
  transfer(false, fd_, reinterpret_cast<char*>(const_cast<float*>(slot)),
           2 * numel_[u] * static_cast<int64_t>(sizeof(float)), offset_[u],
           "NVMe swap " + path_ + ": writing the moments of unit " + std::to_string(unit));
}

void MomentSwap::pass(const std::vector<int32_t>& order, bool write_back, const Visit& visit) {
  std::vector<int32_t> units;
  for (const int32_t u : order) {
    if (swapped(u)) units.push_back(u);
  }
  const size_t depth = slots_.size();
  std::vector<std::future<void>> reads(units.size());
  std::vector<std::future<void>> writes;
  size_t next_read = 0;
  // Unit i uses slot i % depth. Up to depth-1 reads run ahead of the unit
  // being visited; the FIFO queue puts each read after the write of the
  // unit that last used its slot.
  const auto read_ahead = [&](size_t visiting) {
    for (; next_read < units.size() && next_read < visiting + depth; ++next_read) {
      const int32_t u = units[next_read];
      float* slot = slots_[next_read % depth];
      const int64_t bytes = 2 * numel_[static_cast<size_t>(u)] * static_cast<int64_t>(sizeof(float));
      if (written_[static_cast<size_t>(u)]) {
        reads[next_read] = enqueue([this, u, slot] { read_unit(u, slot); });
        traffic_.read += bytes;
      } else {
        reads[next_read] = enqueue([slot, bytes] { std::memset(slot, 0, static_cast<size_t>(bytes)); });
      }
    }
  };
  // The first error wins; every queued job still completes before the
  // slots can be reused or the caller sees the error.
  const auto drain = [&] {
    std::exception_ptr first;
    for (auto& f : reads) {
      if (!f.valid()) continue;
      try {
        f.get();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    for (auto& f : writes) {
      try {
        f.get();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  };
  try {
    for (size_t i = 0; i < units.size(); ++i) {
      read_ahead(i);  // units [i, i + depth): the slot of unit i-1 is refilled after its write
      reads[i].get();
      const int32_t u = units[i];
      float* slot = slots_[i % depth];
      const int64_t n = numel_[static_cast<size_t>(u)];
      visit(u, slot, slot + n);
      if (write_back) {
        written_[static_cast<size_t>(u)] = true;
        writes.push_back(enqueue([this, u, slot] { write_unit(u, slot); }));
        traffic_.written += 2 * n * static_cast<int64_t>(sizeof(float));
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
