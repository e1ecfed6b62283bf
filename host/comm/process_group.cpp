// Process groups (see process_group.h). MPI has no non-blocking form of
// MPI_Comm_create or MPI_Comm_split, so each is preceded by an MPI_Ibarrier
// polled against the deadline: once every rank of the parent arrived, the
// blocking call that follows cannot wait on an absent one.
#include "host/comm/process_group.h"

#include <algorithm>
#include <numeric>

#include "host/comm/mpi_session.h"
#include "host/comm/nccl_communicator.h"
#include "host/util/strformat.h"

namespace accel::comm {
namespace {

// World rank of each rank of `comm` (a local computation, no messages).
std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> ranks(static_cast<size_t>(n));
  std::vector<int> translated(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  MPI_Group_translate_ranks(group, n, ranks.data(), world, translated.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return translated;
}

void arrive(MPI_Comm comm, int64_t timeout_ms, const std::string& what) {
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ibarrier(comm, &request);
  if (rc != MPI_SUCCESS)
    throw CommError(ErrorCode::internal, what + ": MPI_Ibarrier: " + mpi_error_string(rc));
  wait_with_deadline(&request, timeout_ms, what);
}

}  // namespace

// ------------------------------------------------------------- creation --

ProcessGroup::ProcessGroup(MPI_Comm comm, std::string name, std::vector<int> world_ranks, int local_rank,
                           CommOptions options)
    : comm_(comm),
      name_(std::move(name)),
      world_ranks_(std::move(world_ranks)),
      local_rank_(local_rank),
      options_(std::move(options)) {
  try {
    mpi_ = std::make_unique<MpiCommunicator>(comm_, name_, options_, world_ranks_);
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
}

ProcessGroup::~ProcessGroup() {
  nccl_.reset();
  mpi_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<ProcessGroup> ProcessGroup::create_world(MPI_Comm world, int local_rank, CommOptions options,
                                                         std::string name) {
  MPI_Comm comm = duplicate_with_deadline(world, options.timeout_ms, "creating process group '" + name + "'");
  if (options.backend == Backend::nccl) {
    // Asked for NCCL explicitly: a rank without a device is a configuration
    // error now, not at the first CUDA operation.
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    std::string why;
    int first_without = cuda_device_count(&why) > 0 ? size : rank;
    int agreed = size;
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Iallreduce(&first_without, &agreed, 1, MPI_INT, MPI_MIN, comm, &request);
    wait_with_deadline(&request, options.timeout_ms, "checking CUDA devices for backend nccl");
    if (agreed < size) {
      MPI_Comm_free(&comm);
      throw CommError(ErrorCode::failed_precondition,
                      strformat("backend nccl was requested, but rank %d has no CUDA device%s", agreed,
                                agreed == rank ? (" (" + why + ")").c_str() : ""));
    }
  }
  std::vector<int> ranks = world_ranks_of(comm);
  return std::unique_ptr<ProcessGroup>(
      new ProcessGroup(comm, std::move(name), std::move(ranks), local_rank, std::move(options)));
}

std::unique_ptr<ProcessGroup> ProcessGroup::create_world(const MpiSession& session, CommOptions options) {
  return create_world(MPI_COMM_WORLD, session.local_rank(), std::move(options));
}

std::unique_ptr<ProcessGroup> ProcessGroup::new_group(std::span<const int> ranks, const std::string& name) {
  // Validated identically on every rank, so all throw or none does.
  if (ranks.empty())
    throw CommError(ErrorCode::invalid_argument, "new_group '" + name + "': the rank list is empty");
  std::vector<int> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= size()) {
      throw CommError(ErrorCode::invalid_argument,
                      strformat("new_group '%s': rank %d is not a rank of group '%s' (size %d)", name.c_str(),
                                sorted[i], name_.c_str(), size()));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw CommError(ErrorCode::invalid_argument,
                      strformat("new_group '%s': rank %d is listed twice", name.c_str(), sorted[i]));
    }
  }
  arrive(comm_, options_.timeout_ms, "creating process group '" + name + "' from '" + name_ + "'");
  MPI_Group parent = MPI_GROUP_NULL;
  MPI_Group members = MPI_GROUP_NULL;
  MPI_Comm_group(comm_, &parent);
  MPI_Group_incl(parent, static_cast<int>(ranks.size()), ranks.data(), &members);
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_create(comm_, members, &comm);
  MPI_Group_free(&members);
  MPI_Group_free(&parent);
  if (rc != MPI_SUCCESS) {
    throw CommError(ErrorCode::internal,
                    "new_group '" + name + "': MPI_Comm_create: " + mpi_error_string(rc));
  }
  if (comm == MPI_COMM_NULL) return nullptr;
  std::vector<int> world;
  for (int r : ranks) world.push_back(world_ranks_[static_cast<size_t>(r)]);
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(comm, name, std::move(world), local_rank_, options_));
}

std::unique_ptr<ProcessGroup> ProcessGroup::split(int color, int key, const std::string& name) {
  arrive(comm_, options_.timeout_ms, "splitting process group '" + name_ + "' into '" + name + "'");
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &comm);
  if (rc != MPI_SUCCESS) {
    throw CommError(ErrorCode::internal, "split '" + name + "': MPI_Comm_split: " + mpi_error_string(rc));
  }
  if (comm == MPI_COMM_NULL) return nullptr;
  std::vector<int> world = world_ranks_of(comm);
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(comm, name, std::move(world), local_rank_, options_));
}

// ------------------------------------------------------------- dispatch --

Communicator* ProcessGroup::nccl(Status* error) {
  if (nccl_) return nccl_.get();
  if (nccl_error_.ok()) {
    if (options_.backend == Backend::mpi) {
      nccl_error_ = Status::error(ErrorCode::unsupported,
                                  "CUDA memory needs the NCCL backend, and group '" + name_ +
                                      "' was created with backend mpi (Open MPI here is not CUDA-aware)");
    } else {
      try {
        nccl_ = make_nccl_communicator(comm_, local_rank_, name_, options_, world_ranks_);
        return nccl_.get();
      } catch (const CommError& e) {
        nccl_error_ = Status::error(e.code(), e.what());
      }
    }
  }
  if (error) *error = nccl_error_;
  return nullptr;
}

std::optional<Status> ProcessGroup::failure() const {
  if (auto f = mpi_->failure()) return f;
  if (nccl_) return nccl_->failure();
  return std::nullopt;
}

Communicator* ProcessGroup::route(const Buffer& buffer, OpType op, std::string_view label,
                                  std::shared_ptr<Work>* failed) {
  if (!buffer.on_cuda) return mpi_.get();
  Status error;
  if (Communicator* c = nccl(&error)) return c;
  OpInfo info;
  info.op = op;
  info.dtype = buffer.dtype;
  info.count = buffer.count;
  info.label = std::string(label);
  *failed = Work::make_failed(mpi_->state(), std::move(info), error.code, error.message);
  return nullptr;
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Buffer& input, const Buffer& output, ReduceOp op,
                                                     const OpOptions& options) {
  std::shared_ptr<Work> failed;
  Communicator* c = route(input, OpType::all_reduce, options.label, &failed);
  return c ? c->all_reduce_async(input, output, op, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::all_gather_async(const Buffer& input, const Buffer& output,
                                                     const OpOptions& options) {
  std::shared_ptr<Work> failed;
  Communicator* c = route(input, OpType::all_gather, options.label, &failed);
  return c ? c->all_gather_async(input, output, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(const Buffer& input, const Buffer& output,
                                                         ReduceOp op, const OpOptions& options) {
  std::shared_ptr<Work> failed;
  Communicator* c = route(input, OpType::reduce_scatter, options.label, &failed);
  return c ? c->reduce_scatter_async(input, output, op, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::broadcast_async(const Buffer& buffer, int root,
                                                    const OpOptions& options) {
  std::shared_ptr<Work> failed;
  Communicator* c = route(buffer, OpType::broadcast, options.label, &failed);
  return c ? c->broadcast_async(buffer, root, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::all_to_all_v_async(const Buffer& input, std::span<const int64_t> send_counts,
                                                       const Buffer& output, std::span<const int64_t> recv_counts,
                                                       const OpOptions& options) {
  std::shared_ptr<Work> failed;
  Communicator* c = route(input, OpType::all_to_all_v, options.label, &failed);
  return c ? c->all_to_all_v_async(input, send_counts, output, recv_counts, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::all_to_all_async(const Buffer& input, const Buffer& output,
                                                     const OpOptions& options) {
  std::shared_ptr<Work> failed;
  Communicator* c = route(input, OpType::all_to_all, options.label, &failed);
  return c ? c->all_to_all_async(input, output, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::send_async(const Buffer& input, int peer, int tag,
                                               const OpOptions& options) {
  std::shared_ptr<Work> failed;
  Communicator* c = route(input, OpType::send, options.label, &failed);
  return c ? c->send_async(input, peer, tag, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::recv_async(const Buffer& output, int peer, int tag,
                                               const OpOptions& options) {
  std::shared_ptr<Work> failed;
  Communicator* c = route(output, OpType::recv, options.label, &failed);
  return c ? c->recv_async(output, peer, tag, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::batch_p2p_async(std::span<const P2POp> ops, const OpOptions& options) {
  if (ops.empty()) return mpi_->batch_p2p_async(ops, options);
  std::shared_ptr<Work> failed;
  Communicator* c = route(ops.front().buffer, OpType::batch_p2p, options.label, &failed);
  return c ? c->batch_p2p_async(ops, options) : failed;
}

std::shared_ptr<Work> ProcessGroup::barrier_async(const OpOptions& options) {
  return mpi_->barrier_async(options);
}

}  // namespace accel::comm
