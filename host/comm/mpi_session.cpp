// MPI bootstrap (see mpi_session.h).
#include "host/comm/mpi_session.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace accel::comm {
namespace {

bool launched_by_a_launcher() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

// Open MPI 4 puts every isolated singleton's session files under one shared
// directory ($TMPDIR/ompi.<host>.<uid>/jf.0), which each creates on start and
// removes on exit when empty: two one-process runs starting while a third
// ends race on it, and the loser dies in MPI_Init ("A call to mkdir was
// unable to create the desired directory ... File exists", open-mpi/ompi
// #3818, #8510). A directory of this process's own cannot be raced. Returns
// it (set as Open MPI's tmpdir base), or nullptr when the user set a base
// of their own or none could be made (Open MPI's default then).
std::unique_ptr<SessionRoot> make_private_session_root() {
  if (std::getenv("OMPI_MCA_orte_tmpdir_base") != nullptr || std::getenv("OMPI_MCA_orte_top_session_dir") != nullptr) {
    return nullptr;
  }
  std::string base = "/tmp";
  for (const char* name : {"TMPDIR", "TEMP", "TMP"}) {  // Open MPI's own order
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      base = value;
      break;
    }
  }
  auto root = std::make_unique<SessionRoot>(base);
  if (root->path().empty()) return nullptr;
  setenv("OMPI_MCA_orte_tmpdir_base", root->path().c_str(), /*overwrite=*/1);
  return root;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  // Started by hand (no launcher's variables), Open MPI 4's singleton would
  // fork a daemon to serve MPI_Comm_spawn, which Accel never calls: half a
  // second of every one-process start (0.56 s against 0.26 s for a bare
  // MPI_Init here). An isolated singleton skips it; a user's own setting wins.
  if (!launched_by_a_launcher()) {
    setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
    private_session_root_ = make_private_session_root();
  }
  int provided = 0;
  // MULTIPLE: the communication layer's watchdog and async collectives run on
  // their own threads.
  const int initialized = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  // Read by MPI_Init alone: a process this one starts picks its own, and
  // the directory goes now, so a run killed later (SIGKILL too) leaves
  // nothing behind (an isolated singleton writes nothing there after
  // MPI_Init, and MPI_Finalize takes its tree being gone in its stride).
  if (private_session_root_) {
    unsetenv("OMPI_MCA_orte_tmpdir_base");
    private_session_root_->remove();
  }
  if (initialized != MPI_SUCCESS) {
    throw std::runtime_error("MPI_Init_thread failed");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm node_comm = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm);
  MPI_Comm_rank(node_comm, &local_rank_);
  MPI_Comm_size(node_comm, &local_world_size_);
  // Each rank learns its node's lowest world rank (the node comm's rank 0,
  // ordered by world rank), then every rank's; nodes are numbered by it.
  int leader = rank_;
  MPI_Bcast(&leader, 1, MPI_INT, 0, node_comm);
  MPI_Comm_free(&node_comm);
  std::vector<int> leaders(static_cast<size_t>(world_size_));
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> sorted = leaders;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  auto nodes = std::make_shared<std::vector<int>>(leaders.size());
  for (size_t r = 0; r < leaders.size(); ++r) {
    (*nodes)[r] = static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), leaders[r]) - sorted.begin());
  }
  num_nodes_ = static_cast<int>(sorted.size());
  world_nodes_ = std::move(nodes);
  if (world_size_ > 1) {
    MPI_Comm_dup(MPI_COMM_WORLD, &ending_comm_);
    // A dead peer must make every_rank_is_failing answer false, not abort.
    MPI_Comm_set_errhandler(ending_comm_, MPI_ERRORS_RETURN);
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (ending_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ending_comm_);
  MPI_Finalize();
}

bool MpiSession::every_rank_is_failing(int64_t wait_ms) const {
  if (ending_comm_ == MPI_COMM_NULL) return true;  // a world of one
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(ending_comm_, &request) != MPI_SUCCESS) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (int done = 0;;) {
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    // Left pending when it gives up: the job is aborted next.
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool MpiSession::all_succeeded(bool local_ok) const {
  int local = local_ok ? 1 : 0;
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return global != 0;
}

std::string MpiSession::broadcast_from_root(const std::string& value) const {
  char buffer[4096] = {};
  if (rank_ == 0) value.copy(buffer, sizeof(buffer) - 1);
  MPI_Bcast(buffer, sizeof(buffer), MPI_CHAR, 0, MPI_COMM_WORLD);
  return buffer;
}

void MpiSession::abort_job(int exit_code) const {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort should not return; be certain.
}

}  // namespace accel::comm
