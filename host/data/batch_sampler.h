// Which windows make up each global batch, and which of them this rank reads.
//
// The global stream of window indices depends only on (seed, order, dataset):
// batch k is positions [k*B, (k+1)*B) of it. Data-parallel rank r of W takes
// the contiguous share [r*B/W, (r+1)*B/W) of each batch, and micro-step m of
// M takes the m-th slice of that share. So the same seed and global batch B
// give the same sequences per optimizer step at any world size and any
// accumulation — the property parity tests across strategies rest on.
//
//   shuffled    a seeded permutation of all windows per epoch, computed per
//               position (a keyed Feistel network with cycle-walking): no
//               table, so a 2^24-window dataset costs nothing up front
//   sequential  position p is window p mod num_windows (batch k is the k-th
//               contiguous slice of the file), so outside references can
//               reproduce it without our RNG.
// Not thread-safe; cheap to copy.
#pragma once

#include <cstdint>
#include <vector>

#include "host/util/random.h"

#include "host/cli/run_config.h"

namespace accel::data {

class BatchSampler {
 public:
  BatchSampler(int64_t num_windows, DataOrder order, uint64_t seed);

  // Window index at global stream position p (p counts sequences from the start of training).
  int64_t window_at(int64_t position) const;

  // The window indices of micro-step `micro` of this rank's share of global batch `step`.
  std::vector<int64_t> micro_batch(int64_t step, int64_t global_batch, int rank, int world,
                                   int64_t micro, int64_t grad_accum);

 private:
  int64_t num_windows_;
  DataOrder order_;
  uint64_t seed_;
  int half_bits_;  // the Feistel network permutes [0, 4^half_bits_) >= num_windows_
};

}  // namespace accel::data
