// The rings (see ring_collectives.h). With n ranks, rank r, chunk
// k = [begin(k), begin(k) + length(k)) and a rotation o (0 for all_reduce,
// -1 for the lone phases, so that rank r ends owning chunk r):
//   reduce-scatter, step s = 0 .. n-2: send chunk (r - s + o) to r+1,
//     receive chunk (r - s - 1 + o) from r-1 into scratch and combine it
//     with our own contribution; afterwards rank r holds the full reduction
//     of chunk (r + 1 + o).
//   all-gather, step t = 0 .. n-2 (numbered n-1 .. 2n-3 below): send chunk
//     (r - t + 1 + o), receive chunk (r - t + o) straight into the output.
// Each step's chunk travels in segments (receives posted before the
// sends); a reduce-scatter segment is combined as soon as it lands, while
// the next ones are in flight. A reducing step keeps at most
// plan.receive_window segment receives posted, each in a slot of scratch,
// and posts the next segment's receive into a slot as soon as the slot's
// segment is combined: the receive scratch is that many segments, not a
// whole chunk (a rank's rings in flight used to hold a chunk each: ~230 MiB
// at gpt-small's gradient all-reduces on 2 ranks). Receives are posted in
// segment order, and MPI matches messages of one source, tag and
// communicator in the order they were sent, so segment j lands in the
// receive posted for it; a sender whose segment has no receive posted yet
// waits (rendezvous) or is buffered by MPI (eager), never mismatched. The next step is posted as soon as the
// current one completed, inside the same poll. Out of place, step 0 sends
// straight from the input and each received segment is combined with the
// input's, so the input is never copied whole.
//
// Where a partial reduction lives between steps: an all_reduce keeps it in
// its (whole-buffer) output; a lone reduce_scatter's output holds one chunk,
// so partials alternate between two chunk-sized accumulators (one is being
// sent while the next step combines into the other) and the last step
// combines straight into the output. Rank r's own chunk r of the input is
// never sent and is combined only in that last step, so the output may be
// that chunk (in place): each element is read and then written by the same
// combine.
#include "host/comm/ring_collectives.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "host/comm/mpi_communicator.h"
#include "host/comm/mpi_datatypes.h"
#include "host/util/strformat.h"

namespace accel::comm {

namespace {
std::atomic<int64_t> g_scratch_held_bytes{0};
}  // namespace

int64_t comm_scratch_bytes() { return g_scratch_held_bytes.load(std::memory_order_relaxed); }

ScratchPool::~ScratchPool() { g_scratch_held_bytes -= static_cast<int64_t>(idle_bytes_); }

std::vector<uint8_t> ScratchPool::acquire(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i) {
    if (free_[i].size() >= bytes && (best == free_.size() || free_[i].size() < free_[best].size())) best = i;
  }
  if (best < free_.size()) {
    std::vector<uint8_t> found = std::move(free_[best]);
    free_.erase(free_.begin() + static_cast<long>(best));
    idle_bytes_ -= found.size();
    return found;
  }
  g_scratch_held_bytes += static_cast<int64_t>(bytes);
  return std::vector<uint8_t>(bytes);
}

void ScratchPool::release(std::vector<uint8_t> buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  // A handful of buffers covers the rings a caller keeps in flight.
  if (free_.size() < kMaxIdleBuffers && idle_bytes_ + buffer.size() <= kMaxIdleBytes) {
    idle_bytes_ += buffer.size();
    free_.push_back(std::move(buffer));
    return;
  }
  g_scratch_held_bytes -= static_cast<int64_t>(buffer.size());
}

size_t ScratchPool::idle_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_bytes_;
}

namespace {

enum class RingKind { all_reduce, reduce_scatter, all_gather };
// Which of an all_reduce's two phases a ring runs: both, or one of them
// alone (the hierarchical all_reduce's node rings).
enum class RingSpan { whole, reduce_phase, gather_phase };
enum class RingProgress { pending, done, failed };

// One ring's state machine. Not a Work: a RingWork runs one or several in
// order (the hierarchical all_reduce's three), under one Work's lock.
class Ring {
 public:
  // `count` is the whole buffer's element count (n chunks). avg divides each
  // reduced chunk by `divisor` (0: the ring's size).
  Ring(const RingPlan& plan, RingKind kind, const Buffer& input, const Buffer& output, int64_t count, ReduceOp op,
       std::shared_ptr<ScratchPool> pool, RingSpan span = RingSpan::whole, int divisor = 0)
      : plan_(plan),
        kind_(kind),
        rotation_(kind == RingKind::all_reduce ? 0 : -1),
        input_(static_cast<const uint8_t*>(input.data)),
        output_(static_cast<uint8_t*>(output.data)),
        in_place_(input.data == output.data),
        count_(count),
        dtype_(output.dtype),
        element_(dtype_size(output.dtype)),
        segment_(std::max<int64_t>(1, static_cast<int64_t>(plan.segment_bytes / element_))),
        window_(std::max(1, plan.receive_window)),
        op_(op),
        divisor_(divisor > 0 ? divisor : plan.size),
        pool_(std::move(pool)),
        step_(kind == RingKind::all_gather || span == RingSpan::gather_phase ? plan.size - 1 : 0),
        last_step_(kind == RingKind::reduce_scatter || span == RingSpan::reduce_phase ? plan.size - 1
                                                                                        : 2 * (plan.size - 1)) {
    // Receive slots: the window's segments, or the whole chunk if smaller.
    receive_elements_ = std::min<int64_t>(length(0), segment_ * window_);
    const size_t receive_bytes = static_cast<size_t>(receive_elements_) * element_;
    const size_t chunk_bytes = static_cast<size_t>(length(0)) * element_;
    if (kind_ == RingKind::all_reduce && span != RingSpan::gather_phase) {
      scratch_ = pool_->acquire(receive_bytes);
    } else if (kind_ == RingKind::reduce_scatter) {
      // Receive slots, plus two accumulators when a partial must travel on.
      scratch_ = pool_->acquire(receive_bytes + (plan_.size > 2 ? 2 * chunk_bytes : 0));
    }
  }

  ~Ring() {
    release_requests();
    if (pool_) pool_->release(std::move(scratch_));
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // This rank's chunk once the reduce phase is over (an all_reduce's).
  int64_t own_chunk_begin() const { return begin(mod(plan_.rank + 1 + rotation_)); }
  int64_t own_chunk_length() const { return length(mod(plan_.rank + 1 + rotation_)); }

  // Posts the first step; "" or why MPI refused.
  std::string start() {
    std::string problem = post(step_);
    if (kind_ == RingKind::all_gather && problem.empty()) {
      // This rank's own chunk is copied after its send is posted, and the
      // send reads the input (send_source), not the copy: the peer's
      // single-copy read then never waits on cache lines this core is still
      // writing. Copying first ran a 1 MiB all_gather of 2 ranks at 93 us
      // against 65 us (docs/communication.md, "Benchmarks"). In place, the
      // input already is that chunk.
      uint8_t* own = output_ + begin(plan_.rank) * element_;
      if (own != input_) std::memcpy(own, input_, static_cast<size_t>(length(plan_.rank)) * element_);
    }
    return problem;
  }

  // Checks MPI once and moves on as far as it can; on `failed`, *error says why.
  RingProgress poll(std::string* error) {
    while (step_ < last_step_) {
      // Reduce each received segment as soon as it lands, while later
      // segments are still in flight.
      int landed = 0;
      int rc = MPI_Testsome(static_cast<int>(recvs_.size()), recvs_.data(), &landed, indices_.data(),
                            MPI_STATUSES_IGNORE);
      if (rc == MPI_SUCCESS && landed != MPI_UNDEFINED) {
        // In slot order; the reposts below stay in segment order whatever
        // order the slots completed in.
        for (int i = 0; i < landed && rc == MPI_SUCCESS; ++i) {
          const int slot = indices_[static_cast<size_t>(i)];
          segment_landed(slot);
          rc = post_next_receive(slot);
        }
        pending_recvs_ -= landed;
      }
      int sent = 0;
      if (rc == MPI_SUCCESS) {
        rc = MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &sent, MPI_STATUSES_IGNORE);
      }
      if (rc != MPI_SUCCESS) {
        *error = strformat("MPI (ring step %d of %d): %s", step_ + 1, last_step_, mpi_error_string(rc).c_str());
        return RingProgress::failed;
      }
      if (pending_recvs_ > 0 || !sent) return RingProgress::pending;
      ++step_;
      if (step_ == plan_.size - 1 && op_ == ReduceOp::avg) {
        // This rank's chunk is complete: divide it once, before it is gathered.
        const int own = mod(plan_.rank + 1 + rotation_);
        divide_in_place(reduced(plan_.size - 2, own), length(own), dtype_, divisor_);
      }
      if (step_ < last_step_) {
        std::string problem = post(step_);
        if (!problem.empty()) {
          *error = std::move(problem);
          return RingProgress::failed;
        }
      }
    }
    return RingProgress::done;
  }

  // Receives are cancelled, sends freed: point-to-point requests may be.
  void release_requests() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Request& r : recvs_) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
    for (MPI_Request& r : sends_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
  }

 private:
  // The rank of `comm` at place `place` of the ring.
  int member(int place) const {
    return plan_.members.empty() ? place : plan_.members[static_cast<size_t>(place)];
  }
  int mod(int k) const { return ((k % plan_.size) + plan_.size) % plan_.size; }
  // Chunk sizes differ by at most one element; the first count % n are longer.
  int64_t begin(int k) const {
    const int64_t base = count_ / plan_.size;
    const int64_t extra = count_ % plan_.size;
    return k * base + std::min<int64_t>(k, extra);
  }
  int64_t length(int k) const { return count_ / plan_.size + (k < count_ % plan_.size ? 1 : 0); }
  bool reducing(int step) const { return step < plan_.size - 1; }

  int send_chunk(int step) const {
    return reducing(step) ? mod(plan_.rank - step + rotation_)
                          : mod(plan_.rank - (step - (plan_.size - 1)) + 1 + rotation_);
  }
  int recv_chunk(int step) const {
    return reducing(step) ? mod(plan_.rank - step - 1 + rotation_)
                          : mod(plan_.rank - (step - (plan_.size - 1)) + rotation_);
  }

  // Where reduce-scatter step `step` leaves its partial of chunk k.
  uint8_t* reduced(int step, int k) {
    if (kind_ == RingKind::all_reduce) return output_ + begin(k) * element_;
    if (step == plan_.size - 2) return output_;  // the last step: the finished chunk
    return scratch_.data() + static_cast<size_t>(receive_elements_ + (step % 2) * length(0)) * element_;
  }
  // This rank's own contribution to chunk k.
  const uint8_t* contribution(int k) const {
    return (kind_ == RingKind::all_reduce && in_place_ ? output_ : input_) + begin(k) * element_;
  }
  // What step `step` sends of chunk k: our contribution at step 0, the
  // previous step's partial after it, the finished chunk while gathering.
  const uint8_t* send_source(int step, int k) {
    if (step == 0) return contribution(k);
    if (reducing(step)) return reduced(step - 1, k);
    // A pure all_gather's first step sends this rank's input itself.
    if (kind_ == RingKind::all_gather && step == plan_.size - 1) return input_;
    return output_ + begin(k) * element_;
  }

  // The segment in receive slot `slot` of a reducing step has landed:
  // partial = received op own.
  void segment_landed(int slot) {
    if (!reducing(step_)) return;  // all-gather: it landed in the output
    const int k = recv_chunk(step_);
    const int64_t offset = slot_segment_[static_cast<size_t>(slot)] * segment_;
    const int64_t n = std::min<int64_t>(segment_, length(k) - offset);
    reduce_local(scratch_.data() + slot * segment_ * element_, contribution(k) + offset * element_,
                 reduced(step_, k) + offset * element_, n, dtype_, op_);
  }

  // Posts the reducing step's next segment receive into `slot` (free: its
  // segment was combined), if any segment is left. MPI's return code.
  int post_next_receive(int slot) {
    if (!reducing(step_) || next_recv_segment_ >= recv_segments_) return MPI_SUCCESS;
    const int64_t j = next_recv_segment_++;
    slot_segment_[static_cast<size_t>(slot)] = j;
    const int n = static_cast<int>(std::min<int64_t>(segment_, length(recv_chunk(step_)) - j * segment_));
    return MPI_Irecv(scratch_.data() + slot * segment_ * element_, n, plan_.type, member(mod(plan_.rank - 1)),
                     plan_.tag, plan_.comm, &recvs_[static_cast<size_t>(slot)]);
  }

  // Posts the step's receives (a reducing step: the window's first
  // segments; a gathering one: the chunk), then every segment's send.
  std::string post(int step) {
    const int next = member(mod(plan_.rank + 1));
    const int prev = member(mod(plan_.rank - 1));
    const int r = recv_chunk(step);
    const int s = send_chunk(step);
    const uint8_t* from = send_source(step, s);
    // Segments only pay where a received one is reduced while the next
    // travels; a gathering step moves its chunk as one message (several
    // concurrent large messages to one peer ran slower here). Chunks differ
    // in length by up to one element, so this rank's receive and send may
    // have different segment counts; each matches the peer's.
    const int64_t segment = reducing(step) ? segment_ : std::max<int64_t>(1, length(0));
    recv_segments_ = (length(r) + segment - 1) / segment;
    const int64_t send_segments = (length(s) + segment - 1) / segment;
    pending_recvs_ = static_cast<int>(recv_segments_);
    sends_.assign(static_cast<size_t>(send_segments), MPI_REQUEST_NULL);
    if (reducing(step)) {
      // Reduce-scatter receives into scratch slots (combined on landing).
      const int slots = static_cast<int>(std::min<int64_t>(window_, recv_segments_));
      recvs_.assign(static_cast<size_t>(slots), MPI_REQUEST_NULL);
      slot_segment_.assign(static_cast<size_t>(slots), 0);
      next_recv_segment_ = 0;
      for (int slot = 0; slot < slots; ++slot) {
        const int rc = post_next_receive(slot);
        if (rc != MPI_SUCCESS)
          return strformat("MPI (ring step %d): %s", step + 1, mpi_error_string(rc).c_str());
      }
    } else {
      // All-gather receives the finished chunk in place, as one message.
      recvs_.assign(recv_segments_ > 0 ? 1 : 0, MPI_REQUEST_NULL);
      if (recv_segments_ > 0) {
        const int rc = MPI_Irecv(output_ + begin(r) * element_, static_cast<int>(length(r)), plan_.type, prev,
                                 plan_.tag, plan_.comm, recvs_.data());
        if (rc != MPI_SUCCESS)
          return strformat("MPI (ring step %d): %s", step + 1, mpi_error_string(rc).c_str());
      }
    }
    indices_.resize(recvs_.size());
    for (int64_t j = 0; j < send_segments; ++j) {
      const int n = static_cast<int>(std::min<int64_t>(segment, length(s) - j * segment));
      const int rc = MPI_Isend(from + j * segment * element_, n, plan_.type, next, plan_.tag, plan_.comm,
                               &sends_[static_cast<size_t>(j)]);
      if (rc != MPI_SUCCESS)
        return strformat("MPI (ring step %d): %s", step + 1, mpi_error_string(rc).c_str());
      count_sent(plan_.next_link, static_cast<int64_t>(n) * static_cast<int64_t>(element_));
    }
    return {};
  }

  const RingPlan plan_;
  const RingKind kind_;
  const int rotation_;
  const uint8_t* const input_;
  uint8_t* const output_;
  const bool in_place_;
  const int64_t count_;
  const DType dtype_;
  const size_t element_;
  // Elements per segment (the last of a chunk shorter): small enough that
  // reducing one overlaps the next one's transfer, large enough that
  // per-message costs stay negligible.
  const int64_t segment_;
  // Segment receives a reducing step keeps posted (RingPlan::receive_window).
  const int window_;
  int64_t receive_elements_ = 0;  // the receive slots' elements (window or chunk)
  const ReduceOp op_;
  const int divisor_;                        // avg's
  const std::shared_ptr<ScratchPool> pool_;  // none for all_gather
  std::vector<uint8_t> scratch_;  // receive scratch, then a reduce_scatter's two accumulators
  std::vector<MPI_Request> recvs_;  // of step_: one per receive slot (gathering: one)
  std::vector<int64_t> slot_segment_;  // the segment each slot's receive is for
  int64_t recv_segments_ = 0;          // of step_'s chunk
  int64_t next_recv_segment_ = 0;      // the next segment to post a receive for
  std::vector<MPI_Request> sends_;
  std::vector<int> indices_;
  int pending_recvs_ = 0;
  int step_;
  const int last_step_;
};

// The Work of one collective: its rings, run one after the other (each
// starts in the poll that saw the previous one done).
class RingWork final : public Work {
 public:
  RingWork(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
           std::vector<std::unique_ptr<Ring>> rings)
      : Work(std::move(state), std::move(info), timeout_ms), rings_(std::move(rings)) {}

  // Starts the first ring; a Work MPI refused comes back already failed.
  static std::shared_ptr<Work> start(std::shared_ptr<RingWork> work) {
    const std::string problem = work->rings_.front()->start();
    if (!problem.empty()) work->fail_to_start(ErrorCode::internal, problem);
    return work;
  }

 protected:
  Progress poll_locked(std::string* error) override {
    while (current_ < rings_.size()) {
      const RingProgress progress = rings_[current_]->poll(error);
      if (progress == RingProgress::failed) return Progress::failed;
      if (progress == RingProgress::pending) return Progress::pending;
      if (++current_ == rings_.size()) break;
      std::string problem = rings_[current_]->start();
      if (!problem.empty()) {
        *error = std::move(problem);
        return Progress::failed;
      }
    }
    return Progress::done;
  }

  void abandon_locked() override {
    for (const auto& ring : rings_) ring->release_requests();
  }

 private:
  std::vector<std::unique_ptr<Ring>> rings_;
  size_t current_ = 0;
};

std::shared_ptr<Work> start_one(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
                                std::unique_ptr<Ring> ring) {
  std::vector<std::unique_ptr<Ring>> rings;
  rings.push_back(std::move(ring));
  return RingWork::start(
      std::make_shared<RingWork>(std::move(state), std::move(info), timeout_ms, std::move(rings)));
}

}  // namespace

std::shared_ptr<Work> start_ring_all_reduce(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
                                            const RingPlan& plan, const Buffer& input, const Buffer& output,
                                            ReduceOp op, std::shared_ptr<ScratchPool> pool) {
  return start_one(std::move(state), std::move(info), timeout_ms,
                   std::make_unique<Ring>(plan, RingKind::all_reduce, input, output, output.count, op,
                                          std::move(pool)));
}

std::shared_ptr<Work> start_hierarchical_all_reduce(std::shared_ptr<CommState> state, OpInfo info,
                                                    int64_t timeout_ms, const RingPlan& node,
                                                    const RingPlan& across, const Buffer& input,
                                                    const Buffer& output, ReduceOp op,
                                                    std::shared_ptr<ScratchPool> pool) {
  // Sums inside the node; the ring across nodes applies avg, dividing by
  // every rank of the group once the whole sum of its chunk is known.
  const ReduceOp partial = op == ReduceOp::avg ? ReduceOp::sum : op;
  std::vector<std::unique_ptr<Ring>> rings;
  rings.push_back(std::make_unique<Ring>(node, RingKind::all_reduce, input, output, output.count, partial, pool,
                                         RingSpan::reduce_phase));
  Buffer share = output;
  share.data = static_cast<uint8_t*>(output.data) + rings.front()->own_chunk_begin() * dtype_size(output.dtype);
  share.count = rings.front()->own_chunk_length();
  rings.push_back(std::make_unique<Ring>(across, RingKind::all_reduce, share, share, share.count, op, pool,
                                         RingSpan::whole, node.size * across.size));
  rings.push_back(std::make_unique<Ring>(node, RingKind::all_reduce, output, output, output.count, op, nullptr,
                                         RingSpan::gather_phase));
  return RingWork::start(
      std::make_shared<RingWork>(std::move(state), std::move(info), timeout_ms, std::move(rings)));
}

std::shared_ptr<Work> start_ring_reduce_scatter(std::shared_ptr<CommState> state, OpInfo info,
                                                int64_t timeout_ms, const RingPlan& plan, const Buffer& input,
                                                const Buffer& output, ReduceOp op,
                                                std::shared_ptr<ScratchPool> pool) {
  return start_one(std::move(state), std::move(info), timeout_ms,
                   std::make_unique<Ring>(plan, RingKind::reduce_scatter, input, output, input.count, op,
                                          std::move(pool)));
}

bool all_gather_uses_ring(const CommOptions& options, int group_size, size_t output_bytes) {
  return group_size > 1 && group_size <= options.ring_all_gather_max_ranks &&
         output_bytes >= options.ring_all_gather_min_bytes && output_bytes <= options.ring_all_gather_max_bytes;
}

std::shared_ptr<Work> start_ring_all_gather(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
                                            const RingPlan& plan, const Buffer& input, const Buffer& output) {
  return start_one(std::move(state), std::move(info), timeout_ms,
                   std::make_unique<Ring>(plan, RingKind::all_gather, input, output, output.count, ReduceOp::sum,
                                          nullptr));
}

}  // namespace accel::comm
