// One checkpoint directory written by every rank: the multi-rank form of the
// commit protocol of atomic_dir.h, with failures agreed on by all ranks.
//
//   rank 0: create root/<name>.tmp      --- exchange #1 (rank 0's outcome)
//   others: attach
//   every rank: write its files, sync_files
//                                        --- exchange #2 (entries or error)
//   rank 0: check(notes), finalize      --- exchange #3 (rank 0's outcome)
//
// Invariant: either every rank returns the published directory, or every
// rank throws the same one-line CheckpointError naming the failing rank, and
// nothing is published (rank 0 deletes the pending directory when it can;
// one left behind is a `.tmp` that resume ignores). A rank that dies or
// never arrives makes the exchange itself fail by its timeout, so no rank
// waits forever.
//
// The exchange is injected (the seam for tests, and it keeps this library
// free of MPI): any all-gather of one string per rank will do.
//
// Thread-safety: one call per rank; the callbacks run on the calling thread.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "host/checkpoint/safetensors.h"  // CheckpointError

namespace accel::checkpoint {

// Every rank passes its string and receives every rank's, index = rank. A
// collective: every rank calls it at the same point. Throws (anything) when
// the communication fails or times out.
using ExchangeStrings = std::function<std::vector<std::string>(const std::string& mine)>;

// What one rank contributed to the checkpoint.
struct RankContribution {
  std::vector<std::string> files;  // plain names of the files it wrote into the pending directory
  std::string note;                // opaque; rank 0's check receives every rank's
};

// Writes this rank's files into `pending_dir`; throws (anything) to fail the save.
using RankFilesWriter = std::function<RankContribution(const std::filesystem::path& pending_dir)>;

// Runs on rank 0 after every rank's files are written and synced, with
// notes[r] from rank r; throws (anything) to refuse the checkpoint.
using CommitCheck = std::function<void(const std::vector<std::string>& notes)>;

struct RankGroup {
  int rank = 0;
  int world_size = 1;
  ExchangeStrings exchange;  // may be empty when world_size == 1
};

// Writes and publishes root/<name> from every rank of `group` (see above);
// returns root/<name>. Throws CheckpointError("checkpoint root/<name> not
// saved: rank R: <what failed>") on every rank when any rank failed; an
// exception of the exchange itself propagates unchanged.
std::filesystem::path commit_from_all_ranks(const std::filesystem::path& root, const std::string& name,
                                            const RankGroup& group, const RankFilesWriter& write,
                                            const CommitCheck& check = {});

}  // namespace accel::checkpoint
