// All-gather of one variable-length string per rank over any Communicator:
// lengths first, then the bytes padded to the longest. Used where ranks must
// agree on small structured messages (the checkpoint commit's manifest
// entries and errors, rank_commit.h) without a second protocol.
//
// Thread-safety: as Communicator (the group's one issuing thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "host/comm/communicator.h"

namespace accel::comm {

// Largest string a rank may announce by default. The lengths come from
// peers: a peer running another program (an MPMD launch that pairs the wrong
// collectives) sends whatever its buffer held, and trusting that value
// allocated gigabytes or threw std::bad_alloc.
inline constexpr int64_t kMaxExchangedStringBytes = int64_t{64} << 20;

// Every rank's `mine`, index = group rank, on every rank. A collective over
// `comm` (two all_gathers of host memory). Throws CommError with the
// operation's status when either fails or times out, and CommError
// (invalid_argument) "LABEL: rank R announced a string of N bytes (limit M)"
// when a rank's length is negative or above `max_bytes`, before the second
// all_gather (every rank sees the same lengths, so every rank throws alike).
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine, std::string_view label,
                                            int64_t max_bytes = kMaxExchangedStringBytes);

}  // namespace accel::comm
