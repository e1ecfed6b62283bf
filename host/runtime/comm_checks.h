// What the comm services check before a collective leaves the host: the
// handles a plugin passes (groups and works live in generation-tagged
// tables, handle_table.h, so a bogus or stale one is refused instead of
// dereferenced), the memory its tensors describe (each tensor's extent must
// lie inside the allocation it points into, when the host knows that
// allocation: a buffer from memory->allocate, or the model's flat
// parameter/gradient storage), and the cross-rank collective sequence
// (host/comm/sequence_check.h, one per group handle).
//
// ACCEL_COMM_VERIFY (environment, read when the standard groups are made)
// turns on the costlier checks, comma-separated:
//   ops     every collective is compared with the ring neighbour's before it
//           is issued (one neighbour round trip per collective)
//   memory  tensors outside host-issued memory are refused too (a plugin's
//           own stack or heap; ddp's setup checksum is such a tensor)
//   all     both; "1" means ops.
//
// Thread-safety: the tables are internally locked; the extent check reads
// the ledger (locked) and the model's storage (loop thread).
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host/comm/process_group.h"
#include "host/comm/sequence_check.h"
#include "host/runtime/handle_table.h"

namespace accel::runtime {

class HostContext;

// What an AccelGroup* stands for.
struct GroupEntry {
  comm::ProcessGroup* group = nullptr;          // not owned unless `owned`
  std::unique_ptr<comm::ProcessGroup> owned;    // groups a plugin or the mesh made
  std::vector<int32_t> ranks;                   // global ranks, group order
  std::unique_ptr<comm::SequenceCheck> sequence;
  bool host_owned = false;                      // a standard group: never destroyed by a plugin
};

// What an AccelWork* stands for.
struct WorkEntry {
  std::shared_ptr<comm::Work> work;
  std::shared_ptr<GroupEntry> group;  // whose sequence checks to poll while waiting
};

struct CommVerify {
  bool each_op = false;        // ops
  bool strict_memory = false;  // memory
};

// Parses ACCEL_COMM_VERIFY's value (NULL or "" or "0": nothing). Throws
// std::invalid_argument naming the variable and the allowed words.
CommVerify parse_comm_verify(const char* text);

class CommHandles {
 public:
  HandleTable<GroupEntry> groups{0xA6};
  HandleTable<WorkEntry> works{0xA7};
  CommVerify verify;
};

// Sets the group functions of the comm table (comm_group_services.cpp).
void fill_group_services(AccelCommServices& table);

// Handle values <-> the ABI's opaque pointers.
inline AccelGroup* group_handle(uint64_t h) { return reinterpret_cast<AccelGroup*>(static_cast<uintptr_t>(h)); }
inline AccelWork* work_handle(uint64_t h) { return reinterpret_cast<AccelWork*>(static_cast<uintptr_t>(h)); }
inline uint64_t handle_value(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

// The context's tables, made on first use.
CommHandles& handles_of(HostContext& context);

// The group a plugin's handle stands for; NULL is the world (`entry` is then
// the world's standard entry, or null before the standard groups exist).
// Throws ServiceError INVALID_ARGUMENT for a bogus or stale handle, naming
// `role` ("group", "parent").
struct ResolvedGroup {
  comm::ProcessGroup* group = nullptr;
  std::shared_ptr<GroupEntry> entry;
};
ResolvedGroup resolve_group(HostContext& context, const AccelGroup* handle, const char* role = "group");

// Polls every group's sequence check (while a collective waits); throws
// ServiceError ABORTED naming both operations once a peer is known to have
// diverged, or naming the rank once one announced a failure (recorded in
// context.rank_failure and passed on, see below).
void poll_sequences(HostContext& context);

// A failure of one rank alone (a plugin hook that threw here) must not
// leave the others waiting in the step's collectives until the deadline:
// this rank records it in context.rank_failure and sends it to its ring
// successor in every group (SequenceCheck::announce_failure). Once per
// process; never blocks. Loop thread.
void announce_rank_failure(HostContext& context, const std::string& where, int64_t step);

// What a rank heard (a PeerFailed from a sequence check): recorded in
// context.rank_failure and passed on to this rank's successors, so the news
// travels each ring to its end. Loop thread.
void pass_on_rank_failure(HostContext& context, const comm::PeerFailed& heard);

// Refuses (ServiceError INVALID_ARGUMENT) a tensor whose `bytes` from its
// first byte run past the end of the host allocation it points into; with
// `strict`, also one that points into no memory the host knows. `role`:
// "input" / "output".
void check_tensor_memory(const HostContext& context, const DLTensor* tensor, int64_t bytes, const char* role,
                         bool strict);

}  // namespace accel::runtime
