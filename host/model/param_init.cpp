// Initial values from the seed streams or a WeightSource (see param_init.h).
//
// From a source, a slice is asked for as the few rectangles that cover it
// (a flat range: a partial row, whole rows, a partial row; a split's slice:
// one rectangle per fused block), so a source reading files issues a few
// strided reads per slice and never reads a row it does not need.
#include "host/model/param_init.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "host/model/seeded_init.h"

namespace accel::model {
namespace {

// Calls emit(block, offset) for the blocks covering the flat range
// [begin, end) of a matrix `width` wide, `offset` being where the block's
// first element lies in the range; a block's rows are `width` apart.
template <typename Emit>
void for_each_block(int64_t begin, int64_t end, int64_t width, Emit&& emit) {
  int64_t at = begin;
  while (at < end) {
    const int64_t row = at / width, col = at % width;
    if (col != 0 || end - at < width) {
      const int64_t cols = std::min(width - col, end - at);
      emit(WeightBlock{row, 1, col, cols}, at - begin);
      at += cols;
    } else {
      const int64_t rows = (end - at) / width;
      emit(WeightBlock{row, rows, 0, width}, at - begin);
      at += rows * width;
    }
  }
}

int64_t product(const std::vector<int64_t>& shape, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= shape[i];
  return n;
}

}  // namespace

std::pair<int64_t, int64_t> weight_matrix_shape(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {1, shape[0]};
  return {shape[0], product(shape, 1, shape.size())};
}

// ---------------------------------------------------------------------------
// NamedWeightSource
// ---------------------------------------------------------------------------

NamedWeightSource::NamedWeightSource(std::shared_ptr<const NamedWeights> weights) : weights_(std::move(weights)) {
  for (const auto& [name, t] : *weights_) {
    if (t.scalar_type() != at::kFloat || !t.is_contiguous() || !t.is_cpu()) {
      throw std::invalid_argument("initial weight " + name + " is " + c10::toString(t.scalar_type()) + " " +
                                  c10::str(t.sizes()) + ", not a contiguous Float tensor on the CPU");
    }
  }
}

std::map<std::string, std::vector<int64_t>> NamedWeightSource::shapes() const {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [name, t] : *weights_) out.emplace(name, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
  return out;
}

void NamedWeightSource::read_block(const std::string& name, const WeightBlock& block, float* dst, int64_t ld) const {
  const auto found = weights_->find(name);
  if (found == weights_->end()) throw std::logic_error("the initial weights hold no parameter " + name);
  const at::Tensor& whole = found->second;
  const auto [rows, cols] = weight_matrix_shape(std::vector<int64_t>(whole.sizes().begin(), whole.sizes().end()));
  if (block.row0 < 0 || block.rows < 0 || block.col0 < 0 || block.cols < 0 || block.row0 + block.rows > rows ||
      block.col0 + block.cols > cols) {
    throw std::logic_error("parameter " + name + ": block out of range");
  }
  const float* base = whole.const_data_ptr<float>();
  for (int64_t r = 0; r < block.rows; ++r) {
    std::memcpy(dst + r * ld, base + (block.row0 + r) * cols + block.col0, static_cast<size_t>(block.cols) * sizeof(float));
  }
}

// ---------------------------------------------------------------------------
// ParamInit
// ---------------------------------------------------------------------------

const WeightSource& ParamInit::source(const ParamSpec& spec) const {
  if (!weights_) {
    throw std::logic_error("parameter " + spec.name +
                           ": the weights the run was initialised from were already released");
  }
  return *weights_;
}

void ParamInit::fill(const ParamSpec& spec, int64_t begin, int64_t count, float* dst) const {
  if (!from_weights_) {
    init_parameter_slice(spec, seed_, begin, count, dst);
    return;
  }
  const WeightSource& weights = source(spec);
  if (begin < 0 || count < 0 || begin + count > spec.numel()) {
    throw std::logic_error("parameter " + spec.name + ": slice out of range");
  }
  const int64_t width = weight_matrix_shape(spec.shape).second;
  for_each_block(begin, begin + count, width, [&](const WeightBlock& block, int64_t offset) {
    weights.read_block(spec.name, block, dst + offset, width);
  });
}

void ParamInit::fill_local(const ParamSpec& spec, const ParamSplit& split, int64_t begin, int64_t count,
                           float* dst) const {
  if (!split.active()) {
    fill(spec, begin, count, dst);
    return;
  }
  // The local tensor is, along `dim`, `stride` runs of `rows` slices each;
  // a slice (everything after `dim`) is contiguous in both tensors.
  const auto d = static_cast<size_t>(split.dim);
  const std::vector<int64_t>& global = spec.shape;
  const int64_t outer = product(global, 0, d), inner = product(global, d + 1, global.size());
  const int64_t size = global[d];
  const int64_t padded = split.padded > 0 ? split.padded : size;
  const int64_t local_size = padded / split.parts;
  const int64_t rows = local_size / split.stride;  // per fused block
  const int64_t block = size / split.stride;       // a fused block's global rows
  const int64_t end = begin + count;
  if (!from_weights_) {
    // The seed streams produce flat ranges: one per local row.
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t k = 0; k < split.stride; ++k) {
        const int64_t local_row0 = k * rows;
        const int64_t global_row0 = k * block + split.index * rows;
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t lo = ((o * local_size) + local_row0 + r) * inner;
          const int64_t a = std::max(lo, begin), b = std::min(lo + inner, end);
          if (a >= b) continue;
          const int64_t g_row = global_row0 + r;
          if (g_row >= size) {
            std::fill(dst + (a - begin), dst + (b - begin), 0.0f);  // padding
            continue;
          }
          const int64_t g = (o * size + g_row) * inner + (a - lo);
          fill(spec, g, b - a, dst + (a - begin));
        }
      }
    }
    return;
  }
  // From a source: both tensors seen as [outer, rows along dim * inner]
  // ("split view"); fused block k is a band of columns in each. The split
  // view's row o is the matrix view's row o / per_row at column
  // (o % per_row) * global_width (per_row = 1 for dim 1; dim 0 has one row,
  // the whole tensor, read as a flat range).
  const WeightSource& weights = source(spec);
  if (begin < 0 || count < 0 || end > outer * local_size * inner) {
    throw std::logic_error("parameter " + spec.name + ": local slice out of range");
  }
  const int64_t local_width = local_size * inner, global_width = size * inner;
  const int64_t per_row = d == 0 ? 1 : product(global, 1, d);
  auto read_split_view = [&](int64_t o0, int64_t n, int64_t g0, int64_t cols, float* out) {
    if (d == 0) {
      fill(spec, g0, cols, out);  // outer == 1: the row is the flat tensor
    } else if (per_row == 1) {
      weights.read_block(spec.name, WeightBlock{o0, n, g0, cols}, out, local_width);
    } else {
      for (int64_t o = o0; o < o0 + n; ++o) {
        weights.read_block(spec.name, WeightBlock{o / per_row, 1, (o % per_row) * global_width + g0, cols},
                           out + (o - o0) * local_width, local_width);
      }
    }
  };
  for_each_block(begin, end, local_width, [&](const WeightBlock& local, int64_t offset) {
    for (int64_t k = 0; k < split.stride; ++k) {
      const int64_t band_lo = k * rows * inner, band_hi = band_lo + rows * inner;
      const int64_t global_row0 = k * block + split.index * rows;
      const int64_t present = std::clamp<int64_t>(size - global_row0, 0, rows) * inner;  // rows past size: padding
      const int64_t lo = std::max(local.col0, band_lo), hi = std::min(local.col0 + local.cols, band_hi);
      if (lo >= hi) continue;
      float* out = dst + offset + (lo - local.col0);
      const int64_t real_hi = std::min(hi, band_lo + present);
      if (lo < real_hi) read_split_view(local.row0, local.rows, global_row0 * inner + (lo - band_lo), real_hi - lo, out);
      for (int64_t r = 0; r < local.rows; ++r) {
        std::fill(out + r * local_width + std::max<int64_t>(real_hi - lo, 0), out + r * local_width + (hi - lo), 0.0f);
      }
    }
  });
}

}  // namespace accel::model
