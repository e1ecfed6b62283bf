// codec_plan.cpp — the packet layout of an encoded gather (see codec_plan.h).
#include "codec_plan.h"

#include <accel/sdk/error.hpp>
#include <accel/sdk/flat_shard.hpp>

#include <algorithm>

namespace accel::sharding {

CodecGatherPlan plan_codec_gather(const UnitLayout& unit, int32_t parts, const std::vector<bool>& encoded,
                                  int64_t param_bytes) {
  if (param_bytes < 1) throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT, "codec gather: parameter bytes < 1");
  const sdk::FlatShardLayout shards(unit.numel, parts);
  const auto is_encoded = [&](const ParamLayout& p) {
    return p.index >= 0 && static_cast<size_t>(p.index) < encoded.size() && encoded[static_cast<size_t>(p.index)];
  };
  CodecGatherPlan plan;
  plan.ranks.resize(static_cast<size_t>(parts));
  int64_t largest = 0;
  for (int32_t r = 0; r < parts; ++r) {
    CodecRankPacket& packet = plan.ranks[static_cast<size_t>(r)];
    const sdk::FlatRange mine = shards.real_part(r);
    // Two passes: codes first, so the values start at one aligned offset.
    for (int pass = 0; pass < 2; ++pass) {
      const bool codes = pass == 0;
      for (const ParamLayout& p : unit.params) {
        if (is_encoded(p) != codes) continue;
        const sdk::FlatRange part = sdk::intersect(mine, sdk::FlatRange{p.flat_offset, p.flat_offset + p.numel});
        if (part.empty()) continue;
        CodecSegment s;
        s.begin = part.begin;
        s.numel = part.size();
        s.param = p.index;
        s.param_offset = part.begin - p.flat_offset;
        s.encoded = codes;
        if (codes) {
          s.packet_offset = packet.code_bytes;
          packet.code_bytes += s.numel;
        } else {
          s.packet_offset = round_up(packet.code_bytes, kPacketAlign) + packet.value_elements * param_bytes;
          packet.value_elements += s.numel;
        }
        packet.segments.push_back(s);
      }
    }
    std::sort(packet.segments.begin(), packet.segments.end(),
              [](const CodecSegment& a, const CodecSegment& b) { return a.begin < b.begin; });
    plan.encoded_elements += packet.code_bytes;
    const int64_t need = packet.value_elements > 0
                             ? round_up(packet.code_bytes, kPacketAlign) + packet.value_elements * param_bytes
                             : packet.code_bytes;
    largest = std::max(largest, need);
  }
  plan.packet_bytes = round_up(std::max<int64_t>(largest, 1), kPacketAlign);
  return plan;
}

}  // namespace accel::sharding
