// Tests of accel/sdk/flat_slices.hpp and accel/sdk/flat_shard.hpp: the cut of
// a flat range of a row-major tensor into checkpoint rectangles, and the even
// padded shard layout. Pins: the rectangles of every range of several shapes
// (exhaustively) tile exactly that range, in flat order, each contiguous in
// row-major memory, at most 2 per cut dimension plus one; ShapedView's
// geometry; the shard layout's padding and real parts, including shards that
// lie wholly in the padding.
#include <accel/sdk/flat_shard.hpp>
#include <accel/sdk/flat_slices.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using accel::sdk::flat_range_to_rectangles;
using accel::sdk::FlatRange;
using accel::sdk::FlatShardLayout;
using accel::sdk::Rectangle;

// Row-major flat index of `index` in `shape`.
int64_t flat_index(const std::vector<int64_t>& shape, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

// Every element of `r`, by flat index in the tensor, in row-major order.
std::vector<int64_t> elements_of(const std::vector<int64_t>& shape, const Rectangle& r) {
  std::vector<int64_t> out;
  std::vector<int64_t> i(shape.size(), 0);
  std::vector<int64_t> global(shape.size());
  for (int64_t k = 0; k < r.numel(); ++k) {
    for (size_t d = 0; d < shape.size(); ++d) global[d] = r.offset[d] + i[d];
    out.push_back(flat_index(shape, global));
    for (size_t d = shape.size(); d-- > 0;) {
      if (++i[d] < r.shape[d]) break;
      i[d] = 0;
    }
  }
  return out;
}

void expect_exact_tiling(const std::vector<int64_t>& shape, int64_t begin, int64_t count) {
  const std::vector<Rectangle> rects = flat_range_to_rectangles(shape, begin, count);
  int64_t next = begin;
  for (const Rectangle& r : rects) {
    ASSERT_EQ(r.offset.size(), shape.size());
    ASSERT_EQ(r.shape.size(), shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      ASSERT_GE(r.offset[d], 0);
      ASSERT_GE(r.shape[d], 1);
      ASSERT_LE(r.offset[d] + r.shape[d], shape[d]);
    }
    ASSERT_EQ(r.flat_begin, next) << "rectangles out of flat order or with a gap";
    const std::vector<int64_t> elements = elements_of(shape, r);
    for (size_t k = 0; k < elements.size(); ++k) {
      ASSERT_EQ(elements[k], r.flat_begin + static_cast<int64_t>(k)) << "rectangle not contiguous in memory";
    }
    next += r.numel();
  }
  EXPECT_EQ(next, begin + count);
  if (count > 0) {
    const size_t cut_dims = shape.empty() ? 0 : shape.size() - 1;
    EXPECT_LE(rects.size(), 2 * cut_dims + 1);
  } else {
    EXPECT_TRUE(rects.empty());
  }
}

TEST(FlatSlices, EveryRangeOfSeveralShapesTilesExactly) {
  const std::vector<std::vector<int64_t>> shapes = {{7},       {3, 5},       {4, 1},         {1, 6},
                                                    {2, 3, 4}, {3, 1, 2, 3}, {2, 2, 2, 2, 2}};
  for (const auto& shape : shapes) {
    int64_t total = 1;
    for (int64_t e : shape) total *= e;
    for (int64_t begin = 0; begin <= total; ++begin) {
      for (int64_t count = 0; begin + count <= total; ++count) {
        SCOPED_TRACE(::testing::Message() << "shape rank " << shape.size() << " range " << begin << "+" << count);
        expect_exact_tiling(shape, begin, count);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(FlatSlices, MidRowCutGivesLeadingWholeAndTrailingPieces) {
  // [4, 10]: elements 7..33 = row 0 cols 7..9, rows 1..2 whole, row 3 cols 0..3.
  const std::vector<Rectangle> r = flat_range_to_rectangles({4, 10}, 7, 27);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].offset, (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(r[0].shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(r[1].offset, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(r[1].shape, (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(r[2].offset, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(r[2].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(r[2].flat_begin, 30);
}

TEST(FlatSlices, WholeTensorIsOneRectangle) {
  const std::vector<Rectangle> r = flat_range_to_rectangles({3, 4, 5}, 0, 60);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].shape, (std::vector<int64_t>{3, 4, 5}));
}

TEST(FlatSlices, ScalarAndEmptyRanges) {
  const std::vector<Rectangle> scalar = flat_range_to_rectangles({}, 0, 1);
  ASSERT_EQ(scalar.size(), 1u);
  EXPECT_TRUE(scalar[0].shape.empty());
  EXPECT_EQ(scalar[0].numel(), 1);
  EXPECT_TRUE(flat_range_to_rectangles({5, 5}, 10, 0).empty());
}

TEST(FlatSlices, RangeOutsideTheTensorThrows) {
  EXPECT_THROW(flat_range_to_rectangles({2, 3}, 4, 3), accel::sdk::Error);
  EXPECT_THROW(flat_range_to_rectangles({2, 3}, -1, 1), accel::sdk::Error);
}

TEST(FlatSlices, ShapedViewPointsIntoTheBase) {
  std::vector<float> storage(32, 0.0f);
  int64_t base_shape = 32, base_stride = 1;
  DLTensor base{};
  base.data = storage.data();
  base.device = {kDLCPU, 0};
  base.ndim = 1;
  base.dtype = {kDLFloat, 32, 1};
  base.shape = &base_shape;
  base.strides = &base_stride;
  base.byte_offset = 8;  // the base itself starts at element 2
  const accel::sdk::ShapedView view(base, 5, {2, 3, 4});
  const DLTensor* t = view.get();
  EXPECT_EQ(t->ndim, 3);
  EXPECT_EQ(t->byte_offset, 8u + 5u * 4u);
  EXPECT_EQ(t->strides[0], 12);
  EXPECT_EQ(t->strides[1], 4);
  EXPECT_EQ(t->strides[2], 1);
  EXPECT_TRUE(accel_tensor_is_contiguous(t));
  EXPECT_EQ(accel_tensor_begin(t), static_cast<void*>(storage.data() + 7));
}

// ------------------------------------------------------- tensor-parallel slices

// Every element of every rank's slice, through every flat range's rectangles
// and local_to_global, lands on the global element the split holds there
// (computed here from the definition, independently); across the ranks each
// global element is held exactly once and padding maps nowhere.
void check_split(std::vector<int64_t> global, int32_t dim, int64_t blocks, int64_t parts, int64_t padded) {
  const auto d = static_cast<size_t>(dim);
  const int64_t extent = padded > 0 ? padded : global[d];
  std::vector<int64_t> local = global;
  local[d] = extent / parts;
  int64_t global_numel = 1, local_numel = 1, inner = 1;
  for (int64_t x : global) global_numel *= x;
  for (int64_t x : local) local_numel *= x;
  for (size_t k = d + 1; k < global.size(); ++k) inner *= global[k];
  std::vector<int> held(static_cast<size_t>(global_numel), 0);
  for (int64_t rank = 0; rank < parts; ++rank) {
    accel::sdk::SplitSlice split;
    split.dim = dim;
    split.blocks = blocks;
    split.local_offset = rank * (extent / blocks / parts);
    split.local_shape = local;
    split.global_shape = global;
    // The global flat index local element e holds (-1: padding), by definition.
    const auto holds = [&](int64_t e) -> int64_t {
      const int64_t o = e / (local[d] * inner), i = (e / inner) % local[d], w = e % inner;
      const int64_t b = local[d] / blocks;
      const int64_t g = (i / b) * (global[d] / blocks) + split.local_offset + i % b;
      if (g >= global[d]) return -1;
      return (o * global[d] + g) * inner + w;
    };
    for (int64_t begin = 0; begin < local_numel; ++begin) {
      for (int64_t count = 1; begin + count <= local_numel; ++count) {
        std::vector<int64_t> seen;
        for (const Rectangle& r : flat_range_to_rectangles(local, begin, count)) {
          for (const Rectangle& piece : accel::sdk::local_to_global(split, r)) {
            // Walk the piece in row-major order: local memory is contiguous
            // from flat_begin, global positions follow the piece's offset.
            std::vector<int64_t> idx(piece.shape.size(), 0);
            for (int64_t k = 0; k < piece.numel(); ++k) {
              int64_t g = 0;
              for (size_t a = 0; a < idx.size(); ++a) g = g * global[a] + piece.offset[a] + idx[a];
              ASSERT_EQ(holds(piece.flat_begin + k), g) << "rank " << rank << " range " << begin << "+" << count;
              seen.push_back(piece.flat_begin + k);
              for (size_t a = idx.size(); a-- > 0;) {
                if (++idx[a] < piece.shape[a]) break;
                idx[a] = 0;
              }
            }
          }
        }
        // Exactly the range's non-padding elements, each once.
        std::vector<int64_t> want;
        for (int64_t e = begin; e < begin + count; ++e) {
          if (holds(e) >= 0) want.push_back(e);
        }
        std::sort(seen.begin(), seen.end());
        ASSERT_EQ(seen, want) << "rank " << rank << " range " << begin << "+" << count;
      }
    }
    for (int64_t e = 0; e < local_numel; ++e) {
      if (holds(e) >= 0) ++held[static_cast<size_t>(holds(e))];
    }
  }
  for (int h : held) ASSERT_EQ(h, 1);
}

TEST(SplitSlices, RowsSplitInTwo) { check_split({6, 3}, 0, 1, 2, 0); }
TEST(SplitSlices, ColumnsSplitInThree) { check_split({2, 6}, 1, 1, 3, 0); }
TEST(SplitSlices, FusedQkvRowsSplitByBlock) { check_split({12, 2}, 0, 3, 2, 0); }
TEST(SplitSlices, FusedQkvBiasSplitByBlock) { check_split({12}, 0, 3, 2, 0); }
TEST(SplitSlices, PaddedVocabularyDropsThePadding) { check_split({5, 2}, 0, 1, 2, 6); }
TEST(SplitSlices, PaddedVocabularyOverFourRanks) { check_split({5, 3}, 0, 1, 4, 8); }

TEST(SplitSlices, WholeParameterIsUnchanged) {
  const Rectangle r = flat_range_to_rectangles({4, 3}, 2, 7).front();
  const std::vector<Rectangle> out = accel::sdk::local_to_global(accel::sdk::SplitSlice{}, r);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].offset, r.offset);
  EXPECT_EQ(out[0].flat_begin, r.flat_begin);
}

// ------------------------------------------------------------- shard layout

TEST(FlatShard, EvenSplitHasNoPadding) {
  const FlatShardLayout layout(20480, 4);
  EXPECT_EQ(layout.shard_numel(), 5120);
  EXPECT_EQ(layout.padding(), 0);
  EXPECT_EQ(layout.shard(3), (FlatRange{15360, 20480}));
  EXPECT_EQ(layout.real_part(3), (FlatRange{15360, 20480}));
}

TEST(FlatShard, UnevenSplitPadsTheLastShard) {
  const FlatShardLayout layout(49984, 3);  // a gpt-tiny block over 3 ranks
  EXPECT_EQ(layout.shard_numel(), 16662);
  EXPECT_EQ(layout.padded_numel(), 49986);
  EXPECT_EQ(layout.padding(), 2);
  EXPECT_EQ(layout.real_part(0).size(), 16662);
  EXPECT_EQ(layout.real_part(2), (FlatRange{33324, 49984}));
  int64_t total = 0;
  for (int32_t i = 0; i < 3; ++i) total += layout.real_part(i).size();
  EXPECT_EQ(total, 49984);
}

TEST(FlatShard, ShardsWhollyInThePaddingAreEmpty) {
  const FlatShardLayout layout(5, 4);  // shards of 2: [0,2) [2,4) [4,5)+pad [6,8) pad only
  EXPECT_EQ(layout.shard_numel(), 2);
  EXPECT_EQ(layout.real_part(2), (FlatRange{4, 5}));
  EXPECT_TRUE(layout.real_part(3).empty());
  const FlatShardLayout none(0, 3);
  EXPECT_EQ(none.shard_numel(), 0);
  EXPECT_TRUE(none.real_part(0).empty());
}

TEST(FlatShard, IntersectionOfAParameterWithAShard) {
  const FlatShardLayout layout(100, 3);  // shards of 34
  // A parameter at [30, 70) spans shards 0 (30..33), 1 (34..67) and 2 (68..69).
  EXPECT_EQ(intersect(layout.real_part(0), FlatRange{30, 70}), (FlatRange{30, 34}));
  EXPECT_EQ(intersect(layout.real_part(1), FlatRange{30, 70}), (FlatRange{34, 68}));
  EXPECT_EQ(intersect(layout.real_part(2), FlatRange{30, 70}), (FlatRange{68, 70}));
  EXPECT_TRUE(intersect(layout.real_part(2), FlatRange{0, 10}).empty());
}

TEST(FlatShard, BadArgumentsThrow) {
  EXPECT_THROW(FlatShardLayout(10, 0), accel::sdk::Error);
  EXPECT_THROW(FlatShardLayout(-1, 2), accel::sdk::Error);
}

}  // namespace
