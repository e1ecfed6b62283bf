// accel/sdk/flat_slices.hpp — a flat range of a row-major tensor as the
// rectangles a checkpoint stores (accel/checkpoint.h), and views over them.
//
// A sharding strategy holds, per parameter, a contiguous range of its
// row-major elements: [begin, begin + count). A checkpoint stores slices by
// global offset and extent, so that range is cut into rectangles: per cut
// dimension at most a partial leading row, a block of whole rows and a partial
// trailing row. Invariants of flat_range_to_rectangles: the rectangles are in
// flat order, each is contiguous in row-major memory (so a shard's memory can
// be handed to `put`/`get` as it is, with ShapedView), they do not overlap,
// and together they hold exactly the range. An empty range gives none.
//
// Header only, no state: thread-safe.
#pragma once

#include <accel/accel.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/sdk/error.hpp"

namespace accel::sdk {

// A rectangular block of a row-major tensor: offset and extent per dimension,
// and the flat (row-major) index of its first element in the tensor.
struct Rectangle {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  int64_t flat_begin = 0;

  int64_t numel() const noexcept {
    int64_t n = 1;
    for (int64_t extent : shape) n *= extent;
    return n;
  }
};

namespace detail {

// Appends the rectangles of [begin, end) (flat indices relative to the
// sub-tensor made of dims [dim, ndim) at `prefix` (fixed indices of the outer
// dims, extent 1 each), whose first element has flat index `base`).
inline void cut_range(const std::vector<int64_t>& shape, size_t dim, std::vector<int64_t>& prefix, int64_t base,
                      int64_t begin, int64_t end, std::vector<Rectangle>& out) {
  const size_t ndim = shape.size();
  int64_t inner = 1;  // elements of one index of dim `dim`
  for (size_t d = dim + 1; d < ndim; ++d) inner *= shape[d];
  const auto emit = [&](int64_t first, int64_t extent) {
    Rectangle r;
    r.offset = prefix;
    r.shape.assign(prefix.size(), 1);
    r.offset.push_back(first);
    r.shape.push_back(extent);
    for (size_t d = dim + 1; d < ndim; ++d) {
      r.offset.push_back(0);
      r.shape.push_back(shape[d]);
    }
    r.flat_begin = base + first * inner;
    out.push_back(std::move(r));
  };
  // Whole rows of this dimension (the last dimension's "rows" are elements).
  if (begin % inner == 0 && end % inner == 0) {
    emit(begin / inner, (end - begin) / inner);
    return;
  }
  const int64_t first_row = begin / inner;
  const int64_t last_row = (end - 1) / inner;
  const auto descend = [&](int64_t row, int64_t from, int64_t to) {
    prefix.push_back(row);
    cut_range(shape, dim + 1, prefix, base + row * inner, from, to, out);
    prefix.pop_back();
  };
  if (first_row == last_row) {
    descend(first_row, begin - first_row * inner, end - first_row * inner);
    return;
  }
  int64_t whole_begin = first_row;
  if (begin % inner != 0) {
    descend(first_row, begin - first_row * inner, inner);  // partial leading row
    whole_begin = first_row + 1;
  }
  const int64_t whole_end = end % inner != 0 ? last_row : last_row + 1;
  if (whole_begin < whole_end) emit(whole_begin, whole_end - whole_begin);
  if (end % inner != 0) descend(last_row, 0, end - last_row * inner);  // partial trailing row
}

}  // namespace detail

// The rectangles holding elements [begin, begin + count) of a row-major
// tensor of `shape`, in flat order. A 0-d tensor has one element: the range
// [0, 1) gives one rectangle with empty offset and shape. Throws Error
// (INVALID_ARGUMENT) when the range lies outside the tensor or a dimension is
// negative.
inline std::vector<Rectangle> flat_range_to_rectangles(const std::vector<int64_t>& shape, int64_t begin,
                                                       int64_t count) {
  int64_t total = 1;
  for (int64_t extent : shape) {
    if (extent < 0) throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "flat_range_to_rectangles: negative dimension");
    total *= extent;
  }
  if (begin < 0 || count < 0 || begin + count > total) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                format("flat_range_to_rectangles: range [%lld, %lld) outside a tensor of %lld elements",
                       static_cast<long long>(begin), static_cast<long long>(begin + count),
                       static_cast<long long>(total)));
  }
  std::vector<Rectangle> out;
  if (count == 0) return out;
  if (shape.empty()) {
    Rectangle scalar;
    out.push_back(scalar);
    return out;
  }
  std::vector<int64_t> prefix;
  detail::cut_range(shape, 0, prefix, 0, begin, begin + count, out);
  return out;
}

// Where a tensor-parallel slice lies in its global tensor (AccelParamInfo
// after the plan resolved): along `dim` the local tensor holds `blocks` equal
// blocks, each the slice starting at `local_offset` of the matching global
// block (a fused QKV weight: 3 blocks; any other split: 1). Indices past the
// global extent are a VOCAB split's padding. dim < 0: not split.
struct SplitSlice {
  int32_t dim = -1;
  int64_t blocks = 1;
  int64_t local_offset = 0;  // along dim, inside each block
  std::vector<int64_t> local_shape;
  std::vector<int64_t> global_shape;
};

// The pieces of `local` (a Rectangle of the local tensor, as
// flat_range_to_rectangles gives them) by global offset: cut where it
// crosses a block boundary along the split dimension, padding dropped. Each
// piece keeps its shape and, in flat_begin, the local flat index of its first
// element, so it is contiguous in local memory and `put`/`get` take it with
// ShapedView. Throws Error (INTERNAL) when a cut would not be contiguous
// (a rectangle spanning several indices of an outer dimension crossing a
// block boundary: flat_range_to_rectangles never makes one for dim 0).
inline std::vector<Rectangle> local_to_global(const SplitSlice& split, const Rectangle& local) {
  if (split.dim < 0) return {local};
  const auto d = static_cast<size_t>(split.dim);
  if (d >= local.offset.size()) throw Error(ACCEL_ERROR_INTERNAL, "local_to_global: split dimension out of range");
  const int64_t local_block = split.local_shape.at(d) / split.blocks;
  const int64_t global_block = split.global_shape.at(d) / split.blocks;
  const int64_t global_extent = split.global_shape.at(d);
  int64_t inner = 1;  // local elements per index of dim
  for (size_t k = d + 1; k < split.local_shape.size(); ++k) inner *= split.local_shape[k];
  std::vector<Rectangle> out;
  const int64_t first = local.offset[d], end = first + local.shape[d];
  for (int64_t i = first; i < end;) {
    const int64_t block = i / local_block;
    const int64_t stop = std::min(end, (block + 1) * local_block);
    const int64_t global_first = block * global_block + split.local_offset + (i - block * local_block);
    const int64_t kept = std::min(stop - i, global_extent - global_first);  // padding dropped
    if (kept > 0) {
      Rectangle piece = local;
      piece.offset[d] = global_first;
      piece.shape[d] = kept;
      piece.flat_begin = local.flat_begin + (i - first) * inner;
      out.push_back(std::move(piece));
    }
    i = stop;
  }
  if (out.size() > 1) {
    for (size_t k = 0; k < d; ++k) {
      if (local.shape[k] != 1) {
        throw Error(ACCEL_ERROR_INTERNAL, "local_to_global: a rectangle over several outer indices crosses a block");
      }
    }
  }
  return out;
}

// A compact row-major view of `shape` over elements [offset, offset + numel
// of shape) of a contiguous tensor (a flat shard): what checkpoint put/get
// take for one Rectangle. Owns its shape and strides; valid while `base`'s
// memory is.
class ShapedView {
 public:
  ShapedView(const DLTensor& base, int64_t offset, std::vector<int64_t> shape)
      : shape_(std::move(shape)), strides_(shape_.size(), 1) {
    for (size_t d = shape_.size(); d-- > 1;) strides_[d - 1] = strides_[d] * shape_[d];
    view_ = base;
    view_.ndim = static_cast<int32_t>(shape_.size());
    view_.shape = shape_.data();
    view_.strides = strides_.data();
    view_.byte_offset = base.byte_offset + static_cast<uint64_t>(offset) * ((base.dtype.bits + 7u) / 8u);
  }
  ShapedView(const ShapedView&) = delete;
  ShapedView& operator=(const ShapedView&) = delete;
  const DLTensor* get() const noexcept { return &view_; }

 private:
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  DLTensor view_{};
};

}  // namespace accel::sdk
