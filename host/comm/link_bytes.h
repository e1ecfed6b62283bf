// What this process sent, by the kind of link its bytes crossed: to a rank
// on the same node (shared memory), to a rank on another node (the network),
// or through one of Open MPI's own collectives, whose algorithm — and hence
// whose peers — Open MPI picks (small all_reduces, broadcasts, all_to_alls,
// all_gathers off the ring path). The MPI backend counts the payload of
// every message it posts itself (the rings' steps, sends, batched sends) at
// the moment it posts it, by the receiver's node (CommOptions::world_nodes),
// and the payload this rank hands to a library collective; Open MPI's own
// framing and the NCCL backend are not counted. The trainer reports the
// three per step (host.bytes_sent_intra_node, ..._inter_node,
// ..._mpi_collectives), and tests compare them with each algorithm's
// formula and with what the network interfaces carried.
//
// Thread-safety: any thread (relaxed atomics: counters, not a protocol).
#pragma once

#include <cstdint>

namespace accel::comm {

enum class Link { intra_node, inter_node, mpi_collective };

struct LinkBytes {
  int64_t intra_node = 0;
  int64_t inter_node = 0;
  int64_t mpi_collectives = 0;
};

void count_sent(Link link, int64_t bytes);
// Since the process started.
LinkBytes link_bytes_sent();
// Since the previous call (the trainer's per-step figures).
LinkBytes take_link_bytes_sent();

}  // namespace accel::comm
