// Held-out evaluation windows (see held_out.h).
#include "host/data/held_out.h"

#include <cmath>
#include <stdexcept>
#include <utility>

#include "host/util/strformat.h"

namespace accel::data {
namespace {

class WindowSlice final : public TokenDataset {
 public:
  WindowSlice(std::shared_ptr<const TokenDataset> base, int64_t first, int64_t count, std::string label)
      : base_(std::move(base)), first_(first), count_(count), label_(std::move(label)) {}

  int64_t num_windows() const override { return count_; }
  int64_t window_length() const override { return base_->window_length(); }
  void read_window(int64_t index, std::span<int64_t> out) const override {
    if (index < 0 || index >= count_) {
      throw std::out_of_range(strformat("window %lld of a %lld-window slice", static_cast<long long>(index),
                                        static_cast<long long>(count_)));
    }
    base_->read_window(first_ + index, out);
  }
  std::string describe() const override {
    return strformat("%s (%s: windows %lld..%lld of %lld)", base_->describe().c_str(), label_.c_str(),
                     static_cast<long long>(first_), static_cast<long long>(first_ + count_ - 1),
                     static_cast<long long>(base_->num_windows()));
  }

 private:
  std::shared_ptr<const TokenDataset> base_;
  int64_t first_;
  int64_t count_;
  std::string label_;
};

}  // namespace

std::unique_ptr<TokenDataset> window_slice(std::shared_ptr<const TokenDataset> base, int64_t first, int64_t count,
                                           std::string label) {
  if (first < 0 || count <= 0 || first + count > base->num_windows()) {
    throw std::out_of_range(strformat("windows %lld..%lld of a %lld-window dataset", static_cast<long long>(first),
                                      static_cast<long long>(first + count - 1),
                                      static_cast<long long>(base->num_windows())));
  }
  return std::make_unique<WindowSlice>(std::move(base), first, count, std::move(label));
}

RunDatasets open_run_datasets(const std::string& data, const HeldOutSpec& held_out, int64_t seq_len,
                              int64_t vocab_size, uint64_t seed) {
  std::shared_ptr<const TokenDataset> whole = open_dataset(data, seq_len, vocab_size, seed);
  if (!held_out.evaluate) return {std::move(whole), nullptr};
  if (!held_out.eval_data.empty()) {
    // (--eval-data synthetic is refused by the options: the generator's
    // windows are the training data's, so only its tail is held out.)
    try {
      return {std::move(whole), open_dataset(held_out.eval_data, seq_len, vocab_size, seed)};
    } catch (const std::runtime_error& e) {
      // open_dataset names --data; the file at fault is --eval-data's.
      const std::string what = e.what();
      if (what.rfind("--data", 0) != 0) throw;
      throw std::runtime_error("--eval-data" + what.substr(6));
    }
  }
  const int64_t windows = whole->num_windows();
  const auto held = static_cast<int64_t>(std::floor(static_cast<double>(windows) * held_out.fraction));
  if (held < 1) {  // (fraction < 1 always leaves a training window)
    throw std::runtime_error(strformat("--eval-fraction %g of --data's %lld windows of %lld tokens holds out %lld: "
                                       "evaluation needs at least one window (give --eval-data, a larger fraction "
                                       "or more data)",
                                       held_out.fraction, static_cast<long long>(windows),
                                       static_cast<long long>(seq_len + 1), static_cast<long long>(held)));
  }
  RunDatasets datasets;
  datasets.train = window_slice(whole, 0, windows - held, "training");
  datasets.eval = window_slice(whole, windows - held, held, "held out");
  return datasets;
}

}  // namespace accel::data
