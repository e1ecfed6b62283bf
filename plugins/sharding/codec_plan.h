// codec_plan.h — where each element of a unit travels when some of its
// parameters are all-gathered encoded (accel/gather_codec.h: a precision
// plugin's 1-byte codes, fp8's E4M3 weights) and the rest as they are.
//
// The unit's flat buffer is sharded as always (sdk/flat_shard.hpp): rank r
// holds padded elements [r k, (r+1) k). A codec gather moves one packet of
// bytes per rank, the same size on every rank (an all_gather needs equal
// counts): first the codes of the rank's encoded elements (1 byte each), in
// flat order; then, from the next multiple of kPacketAlign, the rank's other
// elements in the parameter dtype (param_bytes each), in flat order; then
// padding up to packet_bytes = the largest rank's need, rounded up to
// kPacketAlign. Padding elements of the last shard travel not at all.
//
// So a gather moves S * packet_bytes bytes instead of S * k * param_bytes:
// encoded elements cost 1 byte, the others param_bytes, plus the difference
// between the ranks (each pays for the fullest one) and the alignment.
// Every segment lies inside one parameter and one shard; a rank's encode
// reads its own segments, the decode after the gather reads every rank's.
// Pure values; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "model_layout.h"

namespace accel::sharding {

// Code and value regions start on this many bytes (any parameter dtype's
// alignment, and a vector width).
inline constexpr int64_t kPacketAlign = 16;

struct CodecSegment {
  int64_t begin = 0;         // unit flat element of the segment's first element
  int64_t numel = 0;
  int32_t param = 0;         // the parameter's index in the unit (ParamLayout::index)
  int64_t param_offset = 0;  // first element inside the parameter
  bool encoded = false;      // travels as codes (1 byte each) or as values
  int64_t packet_offset = 0; // byte offset inside the rank's packet
};

struct CodecRankPacket {
  std::vector<CodecSegment> segments;  // flat order
  int64_t code_bytes = 0;              // encoded elements of this rank
  int64_t value_elements = 0;          // other real elements of this rank
};

struct CodecGatherPlan {
  int64_t packet_bytes = 0;            // per rank
  std::vector<CodecRankPacket> ranks;  // one per sharding rank
  int64_t encoded_elements = 0;        // over the unit
  bool any_encoded() const { return encoded_elements > 0; }
  // Bytes one all_gather of the unit moves (its output): S * packet_bytes.
  int64_t gathered_bytes() const { return packet_bytes * static_cast<int64_t>(ranks.size()); }
};

// `encoded[i]`: whether parameter i of the unit (ParamLayout::index, so
// num_params entries) travels encoded. `parts`: the sharding group size.
// `param_bytes`: bytes of one element in the parameter dtype.
CodecGatherPlan plan_codec_gather(const UnitLayout& unit, int32_t parts, const std::vector<bool>& encoded,
                                  int64_t param_bytes);

inline int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace accel::sharding
