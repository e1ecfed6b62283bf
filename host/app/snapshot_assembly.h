// Snapshots across nodes at start (--snapshot-every, docs/checkpoint_format.md,
// "Snapshots across nodes"): the snapshot root is each node's own memory, so
// a job spanning nodes first proves that it is, and a restarted job makes the
// newest snapshot its nodes hold between them whole on every node before
// `--resume auto` chooses between it and --save.
//
// Both are collectives over the world, made by every rank with the same
// arguments (the run agreement has not run yet: callers first agree that
// every rank wants them).
#pragma once

#include <cstdint>
#include <string>

#include "host/comm/mpi_session.h"

namespace accel::app {

// Throws cli::UsageError on every rank when two nodes see one directory at
// `root` (a shared filesystem: the copies on another node would be no
// copies). Creates `root` on each node. Nothing to do on one node.
void check_snapshot_root_is_per_node(const std::string& root, const comm::MpiSession& mpi);

// The newest step above `newer_than` whose files the nodes hold between
// them (each node's own and its replicas of the previous node's), now
// copied between the nodes' leaders so that every node has it whole; -1
// when there is none or the copying failed on any rank (then a warning
// names why, and the caller falls back to --save).
int64_t assemble_newest_snapshot(const std::string& root, int64_t newer_than, const comm::MpiSession& mpi,
                                 int64_t timeout_ms);

}  // namespace accel::app
