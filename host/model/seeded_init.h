// Counter-based parameter initialisation: element i of parameter `name` is a
// pure function of (seed, name, i). So any slice of a parameter can be
// initialised on its own and equals the same slice of the whole tensor — every
// strategy, at any world size, starts from bit-identical weights.
#pragma once

#include <cstdint>
#include <string_view>

#include "host/model/parameter.h"

namespace accel::model {

// Writes elements [begin, begin + count) of the flattened parameter into dst.
// Thread-safe (pure); parallelised internally over large ranges.
void init_parameter_slice(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t count,
                          float* dst);

// Writes elements [begin, begin + count) of this rank's local slice of a
// split parameter (`split`, see parameter.h) into dst: the same values the
// whole tensor holds at those positions, zeros in padded rows.
void init_local_slice(const ParamSpec& spec, const ParamSplit& split, uint64_t seed, int64_t begin,
                      int64_t count, float* dst);

// The standard normal deviate for element `index` of the stream `stream_key`.
double seeded_normal(uint64_t stream_key, uint64_t index);
uint64_t parameter_stream_key(uint64_t seed, std::string_view name);

}  // namespace accel::model
