// The pool that plugin-managed unit storage (FSDP's gathered parameters and
// their full gradients, ZeRO-3's, a pipeline stage's) is carved from on CPU
// ranks: blocks of exact sizes, reused step after step instead of going back
// to malloc, which on glibc either maps and faults them in again (slow) or,
// once its dynamic mmap threshold has risen past them, keeps them on a heap
// it never returns (resident memory that climbs for tens of steps).
//
// Invariants:
//  - a block is IN USE from allocate() until the last DataPtr owning it is
//    destroyed or cleared (the deleter is the allocator hook: bytes kept
//    alive by anything — an autograd-saved view included — stay in use);
//  - IDLE blocks are kept for reuse only while in-use + idle bytes stay at
//    or below the high-water mark of in-use bytes, i.e. the most the plan
//    ever had gathered at once; anything beyond is unmapped at once. The
//    pool is therefore sized by the plan, never by the history of sizes;
//  - blocks are anonymous mappings (munmap gives the pages back to the OS);
//  - an IDLE block keeps its mapping but no pages: they are handed back to
//    the OS when the block goes idle (madvise MADV_DONTNEED) and fault in
//    again, zero-filled, on reuse. Idle bytes therefore cost address space,
//    not resident memory: a step peaks where the activations peak (the
//    loss's backward), while the pool's in-use peak (the tied embedding's
//    parameters and gradients) comes later, so resident idle blocks would
//    have sat on top of the step's peak. The fault-in costs about 1 ms per
//    4 MiB, far below a step.
// Every pooled block carries a tag (the unit and buffer it belongs to), so
// the bytes still alive of one unit can be counted from the allocator side,
// not from anyone's bookkeeping.
//
// Thread-safety: internally locked; a DataPtr may die on any thread.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace accel::model {

struct StoragePoolStats {
  int64_t in_use_bytes = 0;     // blocks owned by a live DataPtr
  int64_t idle_bytes = 0;       // kept for reuse, mapped but not resident
  int64_t high_water_bytes = 0; // peak in_use_bytes since the process began
  int64_t mapped = 0;           // blocks mapped fresh (cache misses)
  int64_t reused = 0;           // blocks served from the idle cache
};

class StoragePool {
 public:
  // A block of at least `bytes` bytes, tagged `tag` while in use; its
  // DataPtr's deleter gives it back. Throws c10::Error (out of memory).
  c10::DataPtr allocate(size_t bytes, const std::string& tag);

  StoragePoolStats stats() const;
  // Bytes in use under `tag` (0 when none).
  int64_t in_use_bytes(const std::string& tag) const;
  // Unmaps every idle block (tests; a run never needs it).
  void trim();

  StoragePool() = default;
  // Unmaps the idle blocks; blocks still in use must not outlive the pool
  // (the process's pool is never destroyed).
  ~StoragePool() { trim(); }
  StoragePool(const StoragePool&) = delete;
  StoragePool& operator=(const StoragePool&) = delete;

 private:
  struct Block;
  static void give_back(void* context);
  void release(Block* block);
  void trim_locked(int64_t limit);

  mutable std::mutex mutex_;
  std::multimap<size_t, Block*> idle_;  // by size
  std::map<std::string, int64_t> in_use_by_tag_;
  StoragePoolStats stats_;
};

// The process's pool. Never destroyed: DataPtrs may outlive static
// destruction order.
StoragePool& storage_pool();

}  // namespace accel::model
