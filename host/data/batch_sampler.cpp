// Deterministic global batches and per-rank shares (see batch_sampler.h).
#include "host/data/batch_sampler.h"

#include <stdexcept>

namespace accel::data {
namespace {

// One keyed Feistel permutation of [0, 2^(2*half_bits)): four rounds of a
// splitmix-based round function, each a bijection, so the whole is one.
uint64_t feistel(uint64_t x, int half_bits, uint64_t key) {
  const uint64_t mask = (uint64_t{1} << half_bits) - 1;
  uint64_t left = x >> half_bits, right = x & mask;
  for (uint64_t round = 0; round < 4; ++round) {
    const uint64_t mixed = splitmix64(right ^ splitmix64(key + round)) & mask;
    const uint64_t next = left ^ mixed;
    left = right;
    right = next;
  }
  return (left << half_bits) | right;
}

}  // namespace

BatchSampler::BatchSampler(int64_t num_windows, DataOrder order, uint64_t seed)
    : num_windows_(num_windows), order_(order), seed_(seed), half_bits_(1) {
  if (num_windows <= 0) throw std::invalid_argument("dataset has no windows");
  while ((uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(num_windows_)) ++half_bits_;
}

int64_t BatchSampler::window_at(int64_t position) const {
  if (order_ == DataOrder::sequential) return position % num_windows_;
  const uint64_t epoch = static_cast<uint64_t>(position / num_windows_);
  const uint64_t key = splitmix64(seed_ ^ 0xDA7A0DE5ull) ^ splitmix64(epoch);
  // Cycle-walking: apply the permutation of the enclosing power of four until
  // the value lands inside [0, num_windows): a permutation of that range.
  // The domain is less than 4x the range, so this takes a few rounds on average.
  uint64_t x = static_cast<uint64_t>(position % num_windows_);
  do {
    x = feistel(x, half_bits_, key);
  } while (x >= static_cast<uint64_t>(num_windows_));
  return static_cast<int64_t>(x);
}

std::vector<int64_t> BatchSampler::micro_batch(int64_t step, int64_t global_batch, int rank, int world,
                                               int64_t micro, int64_t grad_accum) {
  const int64_t per_rank = global_batch / world;
  const int64_t per_micro = per_rank / grad_accum;
  const int64_t first = step * global_batch + rank * per_rank + micro * per_micro;
  std::vector<int64_t> windows(static_cast<size_t>(per_micro));
  for (int64_t i = 0; i < per_micro; ++i) windows[static_cast<size_t>(i)] = window_at(first + i);
  return windows;
}

}  // namespace accel::data
