// accel/sdk/buffer_pool.hpp — reusable communication buffers for sharding
// plugins (FSDP, ZeRO, tensor parallelism): the staging buffers of
// all_gather and reduce_scatter come back with the same shapes every step,
// so they are taken from and returned to a pool instead of being allocated
// and freed around every collective (on CPU ranks, a fresh large buffer is
// page-faulted in again, or lands on a malloc heap that fragments).
//
// A Lease owns one buffer while it lives and hands it back to the pool when
// it is destroyed or reset. The pool keeps at most `keep_per_shape` idle
// buffers of each (category, dtype, place, numel): the plan's bound on how
// many of one shape are in flight at once (FSDP with limit_all_gathers:
// two groups), so the idle memory is bounded by the plan, never by history;
// a buffer returned beyond that is freed. Idle buffers stay accounted in
// the host's memory ledger under their category. The pool must outlive its
// leases; clear() frees the idle buffers.
//
// Thread-safety: one thread (the plugin's loop thread), like Buffer.
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "accel/sdk/services.hpp"
#include "accel/sdk/tensor.hpp"

namespace accel::sdk {

class BufferPool {
 public:
  struct Stats {
    int64_t allocated = 0;  // buffers allocated fresh (misses)
    int64_t reused = 0;     // leases served from idle buffers (hits)
    int64_t freed = 0;      // returned beyond keep_per_shape
    int64_t idle = 0;       // idle buffers now
  };

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept {
      if (this != &other) {
        reset();
        pool_ = other.pool_;
        key_ = other.key_;
        buffer_ = std::move(other.buffer_);
        other.pool_ = nullptr;
      }
      return *this;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }

    explicit operator bool() const noexcept { return static_cast<bool>(buffer_); }
    const DLTensor& tensor() const noexcept { return buffer_.tensor(); }
    // Hands the buffer back to the pool now.
    void reset() noexcept {
      if (pool_ != nullptr && buffer_) pool_->give_back(key_, std::move(buffer_));
      pool_ = nullptr;
      buffer_ = Buffer();
    }

   private:
    friend class BufferPool;
    using Key = std::tuple<int, uint8_t, uint8_t, uint16_t, int, int64_t>;
    BufferPool* pool_ = nullptr;
    Key key_{};
    Buffer buffer_;
  };

  BufferPool(const Services& services, int keep_per_shape)
      : services_(services), keep_per_shape_(keep_per_shape) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A flat buffer of `numel` elements; its contents are whatever the last
  // lease left (callers overwrite or fill it).
  Lease take(AccelMemoryCategory category, DLDataType dtype, int64_t numel, AccelMemoryPlace place,
             const char* label) {
    Lease lease;
    lease.key_ = Lease::Key{static_cast<int>(category), dtype.code, dtype.bits, dtype.lanes,
                            static_cast<int>(place), numel};
    std::vector<Buffer>& idle = idle_[lease.key_];
    if (!idle.empty()) {
      lease.buffer_ = std::move(idle.back());
      idle.pop_back();
      ++stats_.reused;
      --stats_.idle;
    } else {
      lease.buffer_ = Buffer(services_, category, dtype, {numel}, place, 0, nullptr, label);
      ++stats_.allocated;
    }
    lease.pool_ = this;
    return lease;
  }

  Stats stats() const { return stats_; }

  // Frees every idle buffer.
  void clear() noexcept {
    idle_.clear();
    stats_.idle = 0;
  }

 private:
  void give_back(const Lease::Key& key, Buffer buffer) noexcept {
    std::vector<Buffer>& idle = idle_[key];
    if (static_cast<int>(idle.size()) >= keep_per_shape_) {
      ++stats_.freed;
      return;  // `buffer` is freed here
    }
    idle.push_back(std::move(buffer));
    ++stats_.idle;
  }

  Services services_;
  int keep_per_shape_;
  std::map<Lease::Key, std::vector<Buffer>> idle_;
  Stats stats_;
};

}  // namespace accel::sdk
