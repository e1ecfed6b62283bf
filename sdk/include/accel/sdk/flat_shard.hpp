// accel/sdk/flat_shard.hpp — even sharding of a flat buffer over a group, the
// layout FSDP and ZeRO share.
//
// A unit's flat buffer of `numel` elements is padded to a multiple of the
// group size `parts` and cut into `parts` equal shards: shard i holds padded
// elements [i * shard_numel, (i + 1) * shard_numel). This is the layout a
// reduce_scatter produces (chunk i to group rank i) and an all_gather
// consumes, so a collective over the padded buffer moves shards with no
// per-rank counts. Elements past `numel` are padding (zero by convention);
// real_part(i) is the part of shard i that holds real elements, empty for a
// shard entirely in the padding (possible when numel < parts).
//
// Header only, plain values: thread-safe.
#pragma once

#include <accel/accel.h>

#include <algorithm>
#include <cstdint>

#include "accel/sdk/error.hpp"

namespace accel::sdk {

// A half-open range [begin, end) of flat element indices.
struct FlatRange {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const noexcept { return end > begin ? end - begin : 0; }
  bool empty() const noexcept { return end <= begin; }
  bool operator==(const FlatRange& other) const noexcept {
    return (empty() && other.empty()) || (begin == other.begin && end == other.end);
  }
};

// The common part of two ranges (empty when they do not overlap).
inline FlatRange intersect(FlatRange a, FlatRange b) noexcept {
  FlatRange r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

class FlatShardLayout {
 public:
  FlatShardLayout() = default;
  // Throws Error (INVALID_ARGUMENT) for numel < 0 or parts < 1.
  FlatShardLayout(int64_t numel, int32_t parts) : numel_(numel), parts_(parts) {
    if (numel < 0 || parts < 1) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  format("FlatShardLayout: %lld elements over %d parts", static_cast<long long>(numel), parts));
    }
    shard_numel_ = (numel + parts - 1) / parts;
  }

  int64_t numel() const noexcept { return numel_; }
  int32_t parts() const noexcept { return parts_; }
  // Elements of every shard, padding included: ceil(numel / parts).
  int64_t shard_numel() const noexcept { return shard_numel_; }
  // parts * shard_numel: the size of the buffer a collective moves.
  int64_t padded_numel() const noexcept { return shard_numel_ * parts_; }
  // Padding elements at the end of the padded buffer.
  int64_t padding() const noexcept { return padded_numel() - numel_; }
  // Shard `index`'s elements in the padded buffer.
  FlatRange shard(int32_t index) const noexcept {
    return FlatRange{index * shard_numel_, (index + 1) * shard_numel_};
  }
  // The real (non-padding) elements of shard `index`.
  FlatRange real_part(int32_t index) const noexcept { return intersect(shard(index), FlatRange{0, numel_}); }

 private:
  int64_t numel_ = 0;
  int32_t parts_ = 1;
  int64_t shard_numel_ = 0;
};

}  // namespace accel::sdk
