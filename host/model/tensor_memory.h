// Allocator-side counts of every byte LibTorch tensors hold on the CPU: the
// process's CPU allocator is wrapped by one that counts live bytes (what
// malloc_usable_size says each block is), and the unit storage pool
// (storage_pool.h) reports into the same counter, so "live tensor bytes" and
// its peak cover activations saved by autograd, temporaries, optimizer
// state, shards, communication buffers and unit storage alike — measured
// where the bytes are handed out, not from anyone's bookkeeping.
//
// install_counting_cpu_allocator() must run before the first tensor is made
// (blocks allocated earlier are freed by the allocator that made them:
// each DataPtr carries its own deleter, so mixing is safe, only uncounted).
// Thread-safety: the counters are atomics; any thread may allocate or free.
#pragma once

#include <cstdint>

namespace accel::model {

struct TensorMemory {
  int64_t live_bytes = 0;  // tensor storage alive now (CPU allocator + unit pool)
  int64_t peak_bytes = 0;  // its peak since the last reset_tensor_memory_peak()
};

// Wraps c10's CPU allocator once per process (later calls do nothing).
void install_counting_cpu_allocator();
bool counting_cpu_allocator_installed();

// Called by every allocator that reports here (the counting allocator, the
// unit storage pool) when a block is handed out (+) or given back (-).
void note_tensor_bytes(int64_t delta);

TensorMemory tensor_memory();
void reset_tensor_memory_peak();

}  // namespace accel::model
