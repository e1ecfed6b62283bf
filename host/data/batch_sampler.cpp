// Deterministic global batches and per-rank shares (see batch_sampler.h).
#include "host/data/batch_sampler.h"

#include <numeric>
#include <stdexcept>

#include "host/util/random.h"

namespace accel::data {

BatchSampler::BatchSampler(int64_t num_windows, DataOrder order, uint64_t seed)
    : num_windows_(num_windows), order_(order), seed_(seed) {
  if (num_windows <= 0) throw std::invalid_argument("dataset has no windows");
}

void BatchSampler::ensure_epoch(int64_t epoch) {
  if (epoch == epoch_) return;
  permutation_.resize(static_cast<size_t>(num_windows_));
  std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
  CounterRng rng(splitmix64(seed_ ^ 0xDA7A0DE5ull) ^ splitmix64(static_cast<uint64_t>(epoch)));
  shuffle(permutation_, rng);
  epoch_ = epoch;
}

int64_t BatchSampler::window_at(int64_t position) {
  if (order_ == DataOrder::sequential) return position % num_windows_;
  ensure_epoch(position / num_windows_);
  return permutation_[static_cast<size_t>(position % num_windows_)];
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
