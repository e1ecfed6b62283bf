// All-gather of one variable-length string per rank over any Communicator:
// lengths first, then the bytes padded to the longest. Used where ranks must
// agree on small structured messages (the checkpoint commit's manifest
// entries and errors, rank_commit.h) without a second protocol.
//
// Thread-safety: as Communicator (the group's one issuing thread).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "host/comm/communicator.h"

namespace accel::comm {

// Every rank's `mine`, index = group rank, on every rank. A collective over
// `comm` (two all_gathers of host memory). Throws CommError with the
// operation's status when either fails or times out.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine, std::string_view label);

}  // namespace accel::comm
