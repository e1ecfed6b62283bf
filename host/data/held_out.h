// The training and evaluation windows of one run (--eval-every).
//
// With --eval-data the held-out windows come from their own source and the
// training data is used whole. Without it, the last --eval-fraction of the
// training data's windows are held out: training reads only the windows
// before them (so the split is the same at every world size and resume), and
// a run without evaluation keeps every window for training.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "host/data/token_dataset.h"

namespace accel::data {

struct RunDatasets {
  std::shared_ptr<const TokenDataset> train;
  std::shared_ptr<const TokenDataset> eval;  // null when the run does not evaluate
};

struct HeldOutSpec {
  bool evaluate = false;   // --eval-every > 0
  std::string eval_data;   // --eval-data: empty holds out the training data's tail
  double fraction = 0.1;   // --eval-fraction, in (0, 1)
};

// Opens --data (and --eval-data) as open_dataset does, its errors naming
// the option at fault. Throws std::runtime_error with one line when the
// held-out tail would hold no window (a fraction below 1 always leaves the
// training data one).
RunDatasets open_run_datasets(const std::string& data, const HeldOutSpec& held_out, int64_t seq_len,
                              int64_t vocab_size, uint64_t seed);

// Windows [first, first + count) of `base`, renumbered from 0. Thread-safe
// for reads, as its base.
std::unique_ptr<TokenDataset> window_slice(std::shared_ptr<const TokenDataset> base, int64_t first, int64_t count,
                                           std::string label);

}  // namespace accel::data
