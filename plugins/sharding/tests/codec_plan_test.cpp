// codec_plan_test.cpp — the packet layout of an encoded all-gather
// (codec_plan.h): every real element of the unit travels exactly once, in
// the packet of the rank that holds it, codes first, values aligned after
// them, inside an equal-sized packet per rank.
#include "../codec_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace accel::sharding {
namespace {

ParamLayout param(int32_t index, int64_t offset, int64_t numel) {
  ParamLayout p;
  p.name = "p" + std::to_string(index);
  p.index = index;
  p.flat_offset = offset;
  p.numel = numel;
  p.global_shape = p.local_shape = {numel};
  return p;
}

// A unit from parameter sizes, in index order.
UnitLayout unit_of(const std::vector<int64_t>& sizes) {
  UnitLayout u;
  u.name = "block.0";
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    u.params.push_back(param(static_cast<int32_t>(i), offset, sizes[i]));
    offset += sizes[i];
  }
  u.numel = offset;
  u.num_params = static_cast<int32_t>(sizes.size());
  return u;
}

// The invariants of any plan: checked element by element and byte by byte.
void check_plan(const UnitLayout& unit, int32_t parts, const std::vector<bool>& encoded, int64_t param_bytes,
                const CodecGatherPlan& plan) {
  ASSERT_EQ(plan.ranks.size(), static_cast<size_t>(parts));
  EXPECT_EQ(plan.packet_bytes % kPacketAlign, 0);
  const int64_t k = (unit.numel + parts - 1) / parts;
  std::vector<int> seen(static_cast<size_t>(unit.numel), 0);
  int64_t encoded_total = 0;
  for (int32_t r = 0; r < parts; ++r) {
    const CodecRankPacket& packet = plan.ranks[static_cast<size_t>(r)];
    std::vector<int> bytes(static_cast<size_t>(plan.packet_bytes), 0);
    int64_t codes = 0, values = 0;
    for (const CodecSegment& s : packet.segments) {
      ASSERT_GT(s.numel, 0);
      // Inside this rank's shard and inside its parameter.
      EXPECT_GE(s.begin, r * k);
      EXPECT_LE(s.begin + s.numel, std::min<int64_t>((r + 1) * k, unit.numel));
      const ParamLayout& p = unit.params.at(static_cast<size_t>(s.param));
      EXPECT_EQ(s.begin - p.flat_offset, s.param_offset);
      EXPECT_LE(s.param_offset + s.numel, p.numel);
      EXPECT_EQ(s.encoded, static_cast<bool>(encoded[static_cast<size_t>(s.param)]));
      for (int64_t e = s.begin; e < s.begin + s.numel; ++e) ++seen[static_cast<size_t>(e)];
      // Its bytes in the packet: inside it, overlapping nothing else.
      const int64_t width = s.encoded ? 1 : param_bytes;
      if (!s.encoded) {
        EXPECT_EQ(s.packet_offset % param_bytes, 0);
        EXPECT_GE(s.packet_offset, round_up(packet.code_bytes, kPacketAlign));
      }
      ASSERT_LE(s.packet_offset + s.numel * width, plan.packet_bytes);
      for (int64_t b = s.packet_offset; b < s.packet_offset + s.numel * width; ++b) ++bytes[static_cast<size_t>(b)];
      (s.encoded ? codes : values) += s.numel;
    }
    EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](int n) { return n <= 1; })) << "rank " << r;
    EXPECT_EQ(codes, packet.code_bytes);
    EXPECT_EQ(values, packet.value_elements);
    EXPECT_TRUE(std::is_sorted(packet.segments.begin(), packet.segments.end(),
                               [](const CodecSegment& a, const CodecSegment& b) { return a.begin < b.begin; }));
    encoded_total += codes;
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  EXPECT_EQ(encoded_total, plan.encoded_elements);
}

TEST(CodecPlan, TwoRanksMixedUnit) {
  // ln (4, as is) | W (12, encoded) | b (3, as is) | W2 (8, encoded): 27
  // elements, shards of 14 on 2 ranks.
  const UnitLayout unit = unit_of({4, 12, 3, 8});
  const std::vector<bool> encoded{false, true, false, true};
  const CodecGatherPlan plan = plan_codec_gather(unit, 2, encoded, 2);
  check_plan(unit, 2, encoded, 2, plan);
  // Rank 0: 10 codes of W, then ln's 4 bf16 from byte 16: needs 24.
  // Rank 1: 2 + 8 codes, then b's 3 bf16 from byte 16: needs 22.
  EXPECT_EQ(plan.ranks[0].code_bytes, 10);
  EXPECT_EQ(plan.ranks[0].value_elements, 4);
  EXPECT_EQ(plan.ranks[1].code_bytes, 10);
  EXPECT_EQ(plan.ranks[1].value_elements, 3);
  EXPECT_EQ(plan.packet_bytes, 32);
  EXPECT_EQ(plan.gathered_bytes(), 64);
  EXPECT_EQ(plan.encoded_elements, 20);
  ASSERT_EQ(plan.ranks[1].segments.size(), 3u);
  EXPECT_EQ(plan.ranks[1].segments[0].param_offset, 10);  // W's tail
  EXPECT_EQ(plan.ranks[1].segments[0].packet_offset, 0);
  EXPECT_EQ(plan.ranks[1].segments[1].packet_offset, 16);  // b, aligned after the codes
  EXPECT_EQ(plan.ranks[1].segments[2].packet_offset, 2);   // W2's codes follow W's
}

TEST(CodecPlan, GptBlockOnTwoRanks) {
  // A GPT block of width 32 in the host's flat order (host/model/unit.cpp:
  // weight-decayed parameters first): the four linear weights (c_attn,
  // attn c_proj, c_fc, mlp c_proj), then ln_1 (w, b), the attention biases,
  // ln_2 (w, b), the MLP biases — all of them in rank 1's shard.
  const int64_t C = 32;
  const UnitLayout unit = unit_of({3 * C * C, C * C, 4 * C * C, 4 * C * C, C, C, 3 * C, C, C, C, 4 * C, C});
  std::vector<bool> encoded(12, false);
  for (int i = 0; i < 4; ++i) encoded[static_cast<size_t>(i)] = true;
  const CodecGatherPlan plan = plan_codec_gather(unit, 2, encoded, 2);
  check_plan(unit, 2, encoded, 2, plan);
  EXPECT_EQ(plan.ranks[0].code_bytes, 6352);
  EXPECT_EQ(plan.ranks[0].value_elements, 0);
  EXPECT_EQ(plan.ranks[1].code_bytes, 12 * C * C - 6352);
  EXPECT_EQ(plan.ranks[1].value_elements, 13 * C);
  // Rank 1 is the fuller one: its codes, then its 416 bf16 values.
  EXPECT_EQ(plan.packet_bytes, (12 * C * C - 6352) + 2 * 13 * C);
  EXPECT_EQ(plan.gathered_bytes(), 13536);  // a bf16 gather moves 2 x 12704 = 25408
}

TEST(CodecPlan, EverythingEncodedIsOneBytePerElement) {
  // Only codes: S * ceil(numel / S) bytes rounded to the alignment — a
  // quarter of the fp32 gather and half of the bf16 one for a unit whose
  // shards are multiples of 16.
  const UnitLayout unit = unit_of({64, 192});
  const CodecGatherPlan plan = plan_codec_gather(unit, 4, {true, true}, 4);
  check_plan(unit, 4, {true, true}, 4, plan);
  EXPECT_EQ(plan.packet_bytes, 64);
  EXPECT_EQ(plan.gathered_bytes(), 256);  // fp32: 1024, bf16: 512
}

TEST(CodecPlan, NothingEncodedCarriesValuesOnly) {
  const UnitLayout unit = unit_of({5, 7});
  const CodecGatherPlan plan = plan_codec_gather(unit, 3, {false, false}, 4);
  check_plan(unit, 3, {false, false}, 4, plan);
  EXPECT_FALSE(plan.any_encoded());
  EXPECT_EQ(plan.packet_bytes, 16);  // 4 fp32 values = 16 bytes
}

TEST(CodecPlan, ShardsEntirelyInThePaddingCarryNothing) {
  const UnitLayout unit = unit_of({2, 1});
  const std::vector<bool> encoded{true, false};
  const CodecGatherPlan plan = plan_codec_gather(unit, 8, encoded, 2);
  check_plan(unit, 8, encoded, 2, plan);
  for (int r = 3; r < 8; ++r) EXPECT_TRUE(plan.ranks[static_cast<size_t>(r)].segments.empty());
  EXPECT_EQ(plan.packet_bytes, 16);
}

TEST(CodecPlan, RandomUnitsKeepTheInvariants) {
  std::mt19937 rng(20261125);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> sizes(1 + rng() % 8);
    for (int64_t& n : sizes) n = 1 + static_cast<int64_t>(rng() % 300);
    std::vector<bool> encoded(sizes.size());
    for (size_t i = 0; i < encoded.size(); ++i) encoded[i] = (rng() % 2) != 0;
    const int32_t parts = 1 + static_cast<int32_t>(rng() % 9);
    const int64_t param_bytes = (rng() % 2) != 0 ? 2 : 4;
    const UnitLayout unit = unit_of(sizes);
    SCOPED_TRACE("trial " + std::to_string(trial));
    check_plan(unit, parts, encoded, param_bytes, plan_codec_gather(unit, parts, encoded, param_bytes));
  }
}

TEST(CodecPlan, RefusesAZeroByteDtype) {
  EXPECT_ANY_THROW(plan_codec_gather(unit_of({4}), 2, {true}, 0));
}

}  // namespace
}  // namespace accel::sharding
