// The MPI backend (see mpi_communicator.h): each operation validates its
// request, starts one non-blocking MPI call (several for a batch) and hands
// the request to an MpiWork, which Work's polling loop drives to completion
// or to its deadline.
#include "host/comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::comm {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return strformat("MPI error %d", code);
  return std::string(text, static_cast<size_t>(length));
}

void wait_with_deadline(MPI_Request* request, int64_t timeout_ms, const std::string& task) {
  if (timeout_ms <= 0) timeout_ms = 1800 * 1000;
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const std::string what = strformat("rank %d: %s", world_rank, task.c_str());
  const auto start = SteadyClock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  int64_t sleep_us = 20;
  for (int done = 0;;) {
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) throw CommError(ErrorCode::internal, what + ": " + mpi_error_string(rc));
    if (done) return;
    const auto now = SteadyClock::now();
    if (now >= deadline) {
      // The pending request cannot be withdrawn; the run is ending anyway.
      throw CommError(
          ErrorCode::timeout,
          strformat("%s did not complete within %lld ms: a rank of the communicator did not take part",
                    what.c_str(), static_cast<long long>(timeout_ms)));
    }
    if (now - start < std::chrono::milliseconds(100)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min<int64_t>(sleep_us * 2, 1000);
    }
  }
}

MPI_Comm duplicate_with_deadline(MPI_Comm comm, int64_t timeout_ms, const std::string& what) {
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Comm_idup(comm, &dup, &request);
  if (rc != MPI_SUCCESS)
    throw CommError(ErrorCode::internal, what + ": MPI_Comm_idup: " + mpi_error_string(rc));
  wait_with_deadline(&request, timeout_ms, what);
  return dup;
}

// ------------------------------------------------------------- MpiWork --

class MpiCommunicator::MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms, bool point_to_point)
      : Work(std::move(state), std::move(info), timeout_ms), point_to_point_(point_to_point) {}

  ~MpiWork() override { release_pending(); }

  // Storage for one more request. A receive names its expected length so a
  // message of another length fails the Work instead of passing silently.
  MPI_Request* add_request(bool is_recv = false, int64_t expected = -1, MPI_Datatype type = MPI_DATATYPE_NULL,
                           int peer = -1) {
    requests_.push_back(MPI_REQUEST_NULL);
    pending_.push_back(Pending{is_recv, expected, type, peer});
    return &requests_.back();
  }

  void divide_on_completion(const Buffer& output, int divisor) {
    divide_ = output;
    divisor_ = divisor;
  }
  // After the division: copies `from` to `to` (an in-place reduce_scatter's
  // result, from where MPI leaves it to this rank's chunk; no overlap).
  void move_on_completion(const Buffer& from, void* to) {
    move_from_ = from;
    move_to_ = to;
  }

  void start_failed(const std::string& detail) { fail_to_start(ErrorCode::internal, detail); }

 protected:
  Progress poll_locked(std::string* error) override {
    if (requests_.empty()) return Progress::done;
    statuses_.resize(requests_.size());
    int flag = 0;
    const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, statuses_.data());
    if (rc == MPI_SUCCESS) return flag ? Progress::done : Progress::pending;
    int code = rc;
    if (rc == MPI_ERR_IN_STATUS) {
      for (const MPI_Status& s : statuses_) {
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) code = s.MPI_ERROR;
      }
    }
    *error = "MPI: " + mpi_error_string(code);
    return Progress::failed;
  }

  std::string complete_locked() override {
    for (size_t i = 0; i < pending_.size(); ++i) {
      const Pending& p = pending_[i];
      if (!p.is_recv) continue;
      int received = 0;
      MPI_Get_count(&statuses_[i], p.type, &received);
      if (received != p.expected) {
        return strformat("received %d elements from peer %d, expected %lld (the sender's count differs)",
                         received, p.peer, static_cast<long long>(p.expected));
      }
    }
    if (divisor_ > 0) divide_in_place(divide_.data, divide_.count, divide_.dtype, divisor_);
    if (move_to_ != nullptr) std::memcpy(move_to_, move_from_.data, move_from_.bytes());
    return {};
  }

  void abandon_locked() override { release_pending(); }

 private:
  struct Pending {
    bool is_recv;
    int64_t expected;
    MPI_Datatype type;
    int peer;
  };

  // Point-to-point requests are cancelled (receives) and freed; a pending
  // collective request may not be freed (MPI-3.1 5.12), so it is dropped.
  void release_pending() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (size_t i = 0; i < requests_.size(); ++i) {
      MPI_Request& request = requests_[i];
      if (request == MPI_REQUEST_NULL) continue;
      if (point_to_point_ && !finalized) {
        if (pending_[i].is_recv) MPI_Cancel(&request);
        MPI_Request_free(&request);
      }
      request = MPI_REQUEST_NULL;
    }
  }

  const bool point_to_point_;
  std::vector<MPI_Request> requests_;
  std::vector<Pending> pending_;
  std::vector<MPI_Status> statuses_;
  Buffer divide_{};
  int divisor_ = 0;
  Buffer move_from_{};
  void* move_to_ = nullptr;
};

// ----------------------------------------------------- MpiCommunicator --

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string group_name, CommOptions options,
                                 std::vector<int> world_ranks) {
  comm_ = duplicate_with_deadline(comm, options.timeout_ms,
                                  "creating the MPI communicator of group '" + group_name + "'");
  // Errors come back as codes, to become a Work's status, instead of MPI's
  // default of aborting the job from inside the call.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  try {
    ring_comm_ = duplicate_with_deadline(comm_, options.timeout_ms,
                                         "creating the ring communicator of group '" + group_name + "'");
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &size);
  void* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  if (has_tag_ub) tag_upper_bound_ = *static_cast<int*>(tag_ub);
  state_ = std::make_shared<CommState>("mpi", std::move(group_name), rank, size, std::move(world_ranks),
                                       std::move(options));
  watchdog_ = std::make_unique<Watchdog>(state_);
  try {
    place_on_nodes();
  } catch (...) {
    watchdog_.reset();
    MPI_Comm_free(&ring_comm_);
    MPI_Comm_free(&comm_);
    throw;
  }
}

void MpiCommunicator::place_on_nodes() {
  const std::vector<int>* world_nodes = state_->options().world_nodes.get();
  member_nodes_.assign(static_cast<size_t>(size()), 0);
  if (!world_nodes || world_nodes->empty()) return;
  for (int r = 0; r < size(); ++r) {
    const int world_rank = state_->world_rank_of(r);
    if (world_rank < 0 || world_rank >= static_cast<int>(world_nodes->size())) {
      throw CommError(ErrorCode::invalid_argument,
                      strformat("group '%s': world rank %d has no node in CommOptions::world_nodes (%zu ranks)",
                                state_->group_name().c_str(), world_rank, world_nodes->size()));
    }
    member_nodes_[static_cast<size_t>(r)] = (*world_nodes)[static_cast<size_t>(world_rank)];
  }
  // The members of each node, nodes in order of their first member.
  std::vector<int> node_order;
  std::vector<std::vector<int>> members;
  for (int r = 0; r < size(); ++r) {
    const int node = member_nodes_[static_cast<size_t>(r)];
    const auto found = std::find(node_order.begin(), node_order.end(), node);
    if (found == node_order.end()) {
      node_order.push_back(node);
      members.push_back({r});
    } else {
      members[static_cast<size_t>(found - node_order.begin())].push_back(r);
    }
  }
  const size_t per_node = members.front().size();
  if (members.size() < 2 || per_node < 2) return;
  for (const auto& m : members) {
    if (m.size() != per_node) return;  // uneven nodes: the flat ring
  }
  Hierarchy h;
  for (size_t n = 0; n < members.size(); ++n) {
    const auto place = std::find(members[n].begin(), members[n].end(), rank());
    if (place == members[n].end()) continue;
    h.node = members[n];
    h.node_place = static_cast<int>(place - members[n].begin());
    h.across_place = static_cast<int>(n);
  }
  for (const auto& m : members) h.across.push_back(m[static_cast<size_t>(h.node_place)]);
  hierarchy_ = std::move(h);
}

Link MpiCommunicator::link_to(int peer) const {
  return member_nodes_[static_cast<size_t>(peer)] == member_nodes_[static_cast<size_t>(rank())] ? Link::intra_node
                                                                                                 : Link::inter_node;
}

MpiCommunicator::~MpiCommunicator() {
  watchdog_.reset();  // stop testing requests before the communicator goes
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Freeing with abandoned requests pending is allowed: MPI defers it.
  if (!finalized && ring_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ring_comm_);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::optional<Status> MpiCommunicator::failure() const {
  if (!state_->failed()) return std::nullopt;
  return state_->failure();
}

OpInfo MpiCommunicator::info(OpType op, const Buffer* buffer, int peer, const OpOptions& options) const {
  OpInfo info;
  info.op = op;
  if (buffer) {
    info.dtype = buffer->dtype;
    info.count = buffer->count;
  }
  info.peer = peer;
  info.label = std::string(options.label);
  return info;
}

std::shared_ptr<Work> MpiCommunicator::precheck(const OpInfo& info, const Status& validation,
                                                std::initializer_list<const Buffer*> buffers) {
  if (!validation.ok()) return Work::make_failed(state_, info, validation.code, validation.message);
  for (const Buffer* b : buffers) {
    if (b->on_cuda) {
      return Work::make_failed(state_, info, ErrorCode::invalid_argument,
                               "the MPI backend moves host memory; CUDA buffers go through NCCL "
                               "(a ProcessGroup dispatches them)");
    }
    if (b->count > INT_MAX) {
      return Work::make_failed(state_, info, ErrorCode::unsupported,
                               strformat("%lld elements exceed MPI's int count; split the buffer",
                                         static_cast<long long>(b->count)));
    }
  }
  if (state_->failed()) {
    return Work::make_failed(state_, info, ErrorCode::aborted,
                             "the communicator failed earlier: " + state_->failure().message);
  }
  return nullptr;
}

Status MpiCommunicator::check_peer(const char* role, int peer, int tag) const {
  Status problem = validate::rank_in_group(role, peer, size());
  if (problem.ok() && (tag < 0 || tag > tag_upper_bound_)) {
    problem = Status::error(ErrorCode::invalid_argument,
                            strformat("tag %d is outside [0, %d] (MPI_TAG_UB)", tag, tag_upper_bound_));
  }
  return problem;
}

std::shared_ptr<MpiCommunicator::MpiWork> MpiCommunicator::make_work(OpInfo info, const OpOptions& options) {
  const bool p2p = info.op == OpType::send || info.op == OpType::recv || info.op == OpType::batch_p2p;
  return std::make_shared<MpiWork>(state_, std::move(info), options.timeout_ms, p2p);
}

std::shared_ptr<Work> MpiCommunicator::launched(const std::shared_ptr<MpiWork>& work, int rc) {
  if (rc != MPI_SUCCESS) {
    // The other ranks went ahead: the communicator is out of step from here.
    work->start_failed("MPI: " + mpi_error_string(rc));
    state_->set_failed(work->status());
    return work;
  }
  watchdog_->track(work);
  return work;
}

RingPlan MpiCommunicator::ring_plan(DType dtype) {
  RingPlan plan;
  plan.comm = ring_comm_;
  plan.type = types_.datatype(dtype);
  plan.tag = static_cast<int>(rings_started_++ % (static_cast<uint64_t>(tag_upper_bound_) + 1));
  plan.rank = rank();
  plan.size = size();
  plan.next_link = link_to((rank() + 1) % size());
  plan.segment_bytes = state_->options().ring_segment_bytes;
  plan.receive_window = state_->options().ring_receive_window_segments;
  return plan;
}

bool MpiCommunicator::all_reduce_is_hierarchical(const Buffer& output) const {
  return hierarchy_ && state_->options().hierarchical_all_reduce && output.count >= size();
}

std::shared_ptr<Work> MpiCommunicator::ring_launched(std::shared_ptr<Work> ring) {
  if (ring->finished()) {
    state_->set_failed(ring->status());  // the others went ahead
  } else {
    watchdog_->track(ring);
  }
  return ring;
}

// ---------------------------------------------------------- collectives --

std::shared_ptr<Work> MpiCommunicator::all_reduce_async(const Buffer& input, const Buffer& output,
                                                        ReduceOp op, const OpOptions& options) {
  OpInfo i = info(OpType::all_reduce, &input, -1, options);
  if (auto failed = precheck(i, validate::all_reduce(input, output, op), {&input, &output})) return failed;
  if (size() > 1 && output.count >= size() && output.bytes() >= state_->options().ring_all_reduce_min_bytes) {
    if (all_reduce_is_hierarchical(output)) {
      // Two tags: the node rings (whose messages are ordered: the gather
      // ring starts after the reduce ring ended on both ends) and the ring
      // across nodes.
      RingPlan node = ring_plan(output.dtype), across = ring_plan(output.dtype);
      node.members = hierarchy_->node;
      node.rank = hierarchy_->node_place;
      node.size = static_cast<int>(hierarchy_->node.size());
      node.next_link = Link::intra_node;
      across.members = hierarchy_->across;
      across.rank = hierarchy_->across_place;
      across.size = static_cast<int>(hierarchy_->across.size());
      across.next_link = Link::inter_node;
      return ring_launched(start_hierarchical_all_reduce(state_, std::move(i), options.timeout_ms, node, across,
                                                         input, output, op, scratch_));
    }
    return ring_launched(start_ring_all_reduce(state_, std::move(i), options.timeout_ms, ring_plan(output.dtype),
                                               input, output, op, scratch_));
  }
  count_sent(Link::mpi_collective, static_cast<int64_t>(input.bytes()));
  auto work = make_work(std::move(i), options);
  const void* send = input.data == output.data ? MPI_IN_PLACE : input.data;
  const int rc =
      MPI_Iallreduce(send, output.data, static_cast<int>(output.count), types_.datatype(output.dtype),
                     types_.op(output.dtype, op), comm_, work->add_request());
  if (op == ReduceOp::avg) work->divide_on_completion(output, size());
  return launched(work, rc);
}

std::shared_ptr<Work> MpiCommunicator::all_gather_async(const Buffer& input, const Buffer& output,
                                                        const OpOptions& options) {
  OpInfo i = info(OpType::all_gather, &input, -1, options);
  if (auto failed = precheck(i, validate::all_gather(input, output, size()), {&input, &output}))
    return failed;
  if (input.count > 0 && all_gather_uses_ring(state_->options(), size(), output.bytes())) {
    return ring_launched(
        start_ring_all_gather(state_, std::move(i), options.timeout_ms, ring_plan(output.dtype), input, output));
  }
  count_sent(Link::mpi_collective, static_cast<int64_t>(input.bytes()));
  auto work = make_work(std::move(i), options);
  const char* own_slot = static_cast<const char*>(output.data) + static_cast<size_t>(rank()) * input.bytes();
  const void* send = input.count > 0 && input.data == own_slot ? MPI_IN_PLACE : input.data;
  const MPI_Datatype type = types_.datatype(input.dtype);
  const int rc = MPI_Iallgather(send, static_cast<int>(input.count), type, output.data,
                                static_cast<int>(input.count), type, comm_, work->add_request());
  return launched(work, rc);
}

std::shared_ptr<Work> MpiCommunicator::reduce_scatter_async(const Buffer& input, const Buffer& output,
                                                            ReduceOp op, const OpOptions& options) {
  OpInfo i = info(OpType::reduce_scatter, &input, -1, options);
  if (auto failed = precheck(i, validate::reduce_scatter(input, output, op, rank(), size()), {&input, &output})) {
    return failed;
  }
  // The ring, in place or not: this rank's chunk of the input is read only
  // by its last step, which writes the result over it element by element.
  if (size() > 1 && output.count > 0 && input.bytes() >= state_->options().ring_reduce_scatter_min_bytes) {
    return ring_launched(start_ring_reduce_scatter(state_, std::move(i), options.timeout_ms,
                                                   ring_plan(output.dtype), input, output, op, scratch_));
  }
  count_sent(Link::mpi_collective, static_cast<int64_t>(input.bytes()));
  auto work = make_work(std::move(i), options);
  // In place, MPI_IN_PLACE leaves the result at the start of the input (its
  // receive buffer): it is divided there (avg) and then moved to this
  // rank's chunk, where the caller asked for it.
  const bool in_place = validate::reduce_scatter_in_place(input, output, rank());
  const Buffer result = in_place ? Buffer{input.data, output.count, output.dtype, output.on_cuda, output.device}
                                 : output;
  const int rc = MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : input.data, result.data,
                                           static_cast<int>(output.count), types_.datatype(output.dtype),
                                           types_.op(output.dtype, op), comm_, work->add_request());
  if (op == ReduceOp::avg) work->divide_on_completion(result, size());
  if (in_place && result.data != output.data) work->move_on_completion(result, output.data);
  return launched(work, rc);
}

std::shared_ptr<Work> MpiCommunicator::broadcast_async(const Buffer& buffer, int root,
                                                       const OpOptions& options) {
  OpInfo i = info(OpType::broadcast, &buffer, root, options);
  Status problem = validate::buffer("buffer", buffer);
  if (problem.ok()) problem = validate::rank_in_group("root", root, size());
  if (auto failed = precheck(i, problem, {&buffer})) return failed;
  if (root == rank()) count_sent(Link::mpi_collective, static_cast<int64_t>(buffer.bytes()));
  auto work = make_work(std::move(i), options);
  const int rc = MPI_Ibcast(buffer.data, static_cast<int>(buffer.count), types_.datatype(buffer.dtype), root,
                            comm_, work->add_request());
  return launched(work, rc);
}

std::shared_ptr<Work> MpiCommunicator::all_to_all_async(const Buffer& input, const Buffer& output,
                                                        const OpOptions& options) {
  OpInfo i = info(OpType::all_to_all, &input, -1, options);
  if (auto failed = precheck(i, validate::all_to_all(input, output, size()), {&input, &output}))
    return failed;
  count_sent(Link::mpi_collective, static_cast<int64_t>(input.bytes()));
  auto work = make_work(std::move(i), options);
  const int chunk = static_cast<int>(input.count / size());
  const MPI_Datatype type = types_.datatype(input.dtype);
  const void* send = input.data == output.data && input.count > 0 ? MPI_IN_PLACE : input.data;
  const int rc = MPI_Ialltoall(send, chunk, type, output.data, chunk, type, comm_, work->add_request());
  return launched(work, rc);
}

std::shared_ptr<Work> MpiCommunicator::all_to_all_v_async(const Buffer& input, std::span<const int64_t> send_counts,
                                                          const Buffer& output, std::span<const int64_t> recv_counts,
                                                          const OpOptions& options) {
  OpInfo i = info(OpType::all_to_all_v, &input, -1, options);
  if (auto failed = precheck(i, validate::all_to_all_v(input, send_counts, output, recv_counts, size()),
                             {&input, &output})) {
    return failed;
  }
  auto work = std::make_shared<MpiWork>(state_, std::move(i), options.timeout_ms, /*point_to_point=*/true);
  // Taken in issue order on every rank, so every rank names the same tag.
  const RingPlan plan = ring_plan(input.dtype);
  const size_t element = dtype_size(input.dtype);
  int64_t offset = 0;
  for (int peer = 0; peer < size(); ++peer) {
    const int count = static_cast<int>(recv_counts[static_cast<size_t>(peer)]);
    const int rc = MPI_Irecv(static_cast<char*>(output.data) + static_cast<size_t>(offset) * element, count,
                             plan.type, peer, plan.tag, plan.comm, work->add_request(true, count, plan.type, peer));
    if (rc != MPI_SUCCESS) return launched(work, rc);
    offset += count;
  }
  offset = 0;
  for (int peer = 0; peer < size(); ++peer) {
    const int count = static_cast<int>(send_counts[static_cast<size_t>(peer)]);
    const int rc = MPI_Isend(static_cast<const char*>(input.data) + static_cast<size_t>(offset) * element, count,
                             plan.type, peer, plan.tag, plan.comm, work->add_request());
    if (rc != MPI_SUCCESS) return launched(work, rc);
    if (peer != rank()) count_sent(link_to(peer), static_cast<int64_t>(count) * static_cast<int64_t>(element));
    offset += count;
  }
  return launched(work, MPI_SUCCESS);
}

std::shared_ptr<Work> MpiCommunicator::barrier_async(const OpOptions& options) {
  OpInfo i = info(OpType::barrier, nullptr, -1, options);
  if (auto failed = precheck(i, Status{}, {})) return failed;
  auto work = make_work(std::move(i), options);
  return launched(work, MPI_Ibarrier(comm_, work->add_request()));
}

// ------------------------------------------------------- point to point --

std::shared_ptr<Work> MpiCommunicator::send_async(const Buffer& input, int peer, int tag,
                                                  const OpOptions& options) {
  OpInfo i = info(OpType::send, &input, peer, options);
  Status problem = validate::buffer("input", input);
  if (problem.ok()) problem = check_peer("peer", peer, tag);
  if (auto failed = precheck(i, problem, {&input})) return failed;
  auto work = make_work(std::move(i), options);
  const int rc = MPI_Isend(input.data, static_cast<int>(input.count), types_.datatype(input.dtype), peer, tag,
                           comm_, work->add_request());
  if (rc == MPI_SUCCESS) count_sent(link_to(peer), static_cast<int64_t>(input.bytes()));
  return launched(work, rc);
}

std::shared_ptr<Work> MpiCommunicator::recv_async(const Buffer& output, int peer, int tag,
                                                  const OpOptions& options) {
  OpInfo i = info(OpType::recv, &output, peer, options);
  Status problem = validate::buffer("output", output);
  if (problem.ok()) problem = check_peer("peer", peer, tag);
  if (auto failed = precheck(i, problem, {&output})) return failed;
  auto work = make_work(std::move(i), options);
  const MPI_Datatype type = types_.datatype(output.dtype);
  const int rc = MPI_Irecv(output.data, static_cast<int>(output.count), type, peer, tag, comm_,
                           work->add_request(true, output.count, type, peer));
  return launched(work, rc);
}

std::shared_ptr<Work> MpiCommunicator::batch_p2p_async(std::span<const P2POp> ops, const OpOptions& options) {
  OpInfo i = info(OpType::batch_p2p, nullptr, -1, options);
  i.count = static_cast<int64_t>(ops.size());
  Status problem;
  std::vector<const Buffer*> buffers;
  for (const P2POp& op : ops) {
    if (problem.ok())
      problem = validate::buffer(op.kind == P2POp::Kind::send ? "send buffer" : "recv buffer", op.buffer);
    if (problem.ok()) problem = check_peer("peer", op.peer, op.tag);
    buffers.push_back(&op.buffer);
  }
  if (auto failed = precheck(i, problem, {})) return failed;
  for (const Buffer* b : buffers) {
    if (auto failed = precheck(i, Status{}, {b})) return failed;
  }
  auto work = make_work(std::move(i), options);
  for (const P2POp& op : ops) {
    const MPI_Datatype type = types_.datatype(op.buffer.dtype);
    const int count = static_cast<int>(op.buffer.count);
    const int rc = op.kind == P2POp::Kind::send
                       ? MPI_Isend(op.buffer.data, count, type, op.peer, op.tag, comm_, work->add_request())
                       : MPI_Irecv(op.buffer.data, count, type, op.peer, op.tag, comm_,
                                   work->add_request(true, op.buffer.count, type, op.peer));
    if (rc != MPI_SUCCESS) return launched(work, rc);
    if (op.kind == P2POp::Kind::send) count_sent(link_to(op.peer), static_cast<int64_t>(op.buffer.bytes()));
  }
  return launched(work, MPI_SUCCESS);
}

}  // namespace accel::comm
