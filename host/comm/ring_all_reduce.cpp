// The ring all_reduce (see ring_all_reduce.h). With n ranks, rank r and
// chunk k = [begin(k), begin(k) + length(k)):
//   reduce-scatter, step s = 0 .. n-2: send chunk (r - s) to r+1, receive
//     chunk (r - s - 1) from r-1 into scratch and combine it into the output;
//     afterwards rank r holds the full reduction of chunk (r + 1).
//   all-gather, step t = 0 .. n-2: send chunk (r - t + 1), receive chunk
//     (r - t) straight into the output.
// Each step's chunk travels in segments (all receives posted before the
// sends); a reduce-scatter segment is combined as soon as it lands, while
// the next ones are in flight. The next step is posted as soon as the
// current one completed, inside the same poll. Out of place, step 0 sends
// straight from the input and each received segment is combined with the
// input's, so the input is never copied whole.
#include "host/comm/ring_all_reduce.h"

#include <algorithm>

#include "host/comm/mpi_communicator.h"
#include "host/comm/mpi_datatypes.h"
#include "host/util/strformat.h"

namespace accel::comm {

std::vector<uint8_t> ScratchPool::acquire(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < free_.size(); ++i) {
    if (free_[i].size() >= bytes) {
      std::vector<uint8_t> found = std::move(free_[i]);
      free_.erase(free_.begin() + static_cast<long>(i));
      return found;
    }
  }
  return std::vector<uint8_t>(bytes);
}

void ScratchPool::release(std::vector<uint8_t> buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  // A handful of buffers covers the rings a caller keeps in flight.
  if (free_.size() < 4) free_.push_back(std::move(buffer));
}

namespace {

class RingAllReduceWork final : public Work {
 public:
  RingAllReduceWork(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms, const RingPlan& plan,
                    const Buffer& input, const Buffer& output, ReduceOp op, std::shared_ptr<ScratchPool> pool)
      : Work(std::move(state), std::move(info), timeout_ms),
        plan_(plan),
        input_(static_cast<const uint8_t*>(input.data)),
        output_(static_cast<uint8_t*>(output.data)),
        in_place_(input.data == output.data),
        count_(output.count),
        dtype_(output.dtype),
        element_(dtype_size(output.dtype)),
        segment_(std::max<int64_t>(1, static_cast<int64_t>(plan.segment_bytes / element_))),
        op_(op),
        pool_(std::move(pool)) {
    scratch_ = pool_->acquire(static_cast<size_t>(length(0)) * element_);
  }

  ~RingAllReduceWork() override {
    release_requests();
    pool_->release(std::move(scratch_));
  }

  // Posts the first step; "" or why MPI refused.
  std::string start() { return post(0); }

  void start_failed(const std::string& detail) { fail_to_start(ErrorCode::internal, detail); }

 protected:
  Progress poll_locked(std::string* error) override {
    const int last = 2 * (plan_.size - 1);
    while (step_ < last) {
      // Reduce each received segment as soon as it lands, while later
      // segments are still in flight.
      int landed = 0;
      int rc = MPI_Testsome(static_cast<int>(recvs_.size()), recvs_.data(), &landed, indices_.data(),
                            MPI_STATUSES_IGNORE);
      if (rc == MPI_SUCCESS && landed != MPI_UNDEFINED) {
        for (int i = 0; i < landed; ++i) segment_landed(indices_[static_cast<size_t>(i)]);
        pending_recvs_ -= landed;
      }
      int sent = 0;
      if (rc == MPI_SUCCESS) {
        rc = MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &sent, MPI_STATUSES_IGNORE);
      }
      if (rc != MPI_SUCCESS) {
        *error = strformat("MPI (ring step %d of %d): %s", step_ + 1, last, mpi_error_string(rc).c_str());
        return Progress::failed;
      }
      if (pending_recvs_ > 0 || !sent) return Progress::pending;
      ++step_;
      if (step_ == plan_.size - 1 && op_ == ReduceOp::avg) {
        // This rank's chunk is complete: divide it once, before it is gathered.
        const int own = mod(plan_.rank + 1);
        divide_in_place(output_ + begin(own) * element_, length(own), dtype_, plan_.size);
      }
      if (step_ < last) {
        std::string problem = post(step_);
        if (!problem.empty()) {
          *error = std::move(problem);
          return Progress::failed;
        }
      }
    }
    return Progress::done;
  }

  void abandon_locked() override { release_requests(); }

 private:
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
    return reducing(step) ? mod(plan_.rank - step) : mod(plan_.rank - (step - (plan_.size - 1)) + 1);
  }
  int recv_chunk(int step) const {
    return reducing(step) ? mod(plan_.rank - step - 1) : mod(plan_.rank - (step - (plan_.size - 1)));
  }

  // Segment j of a reduce-scatter receive: output = received op own. Out of
  // place, our own contribution is still in the input, and the combine
  // reads it from there (no copy of the input into the output, ever).
  void segment_landed(int j) {
    if (!reducing(step_)) return;  // all-gather: it landed in the output
    const int k = recv_chunk(step_);
    const int64_t first = begin(k) + j * segment_;
    const int64_t n = std::min<int64_t>(segment_, begin(k) + length(k) - first);
    uint8_t* out = output_ + first * element_;
    const uint8_t* own = (in_place_ ? output_ : input_) + first * element_;
    reduce_local(scratch_.data() + (first - begin(k)) * element_, own, out, n, dtype_, op_);
  }

  // Posts every segment's receive, then every segment's send, of `step`.
  std::string post(int step) {
    const int next = mod(plan_.rank + 1);
    const int prev = mod(plan_.rank - 1);
    const int r = recv_chunk(step);
    const int s = send_chunk(step);
    // Reduce-scatter receives into scratch (combined on landing);
    // all-gather receives the finished chunk in place. Step 0 sends our own
    // contribution, which out of place is still only in the input.
    uint8_t* into = reducing(step) ? scratch_.data() : output_ + begin(r) * element_;
    const uint8_t* from = (step == 0 && !in_place_ ? input_ : output_) + begin(s) * element_;
    // Chunks differ in length by up to one element, so this rank's receive
    // and send may have different segment counts; each matches the peer's.
    const int64_t recv_segments = (length(r) + segment_ - 1) / segment_;
    const int64_t send_segments = (length(s) + segment_ - 1) / segment_;
    recvs_.assign(static_cast<size_t>(recv_segments), MPI_REQUEST_NULL);
    sends_.assign(static_cast<size_t>(send_segments), MPI_REQUEST_NULL);
    indices_.resize(static_cast<size_t>(recv_segments));
    pending_recvs_ = static_cast<int>(recv_segments);
    for (int64_t j = 0; j < recv_segments; ++j) {
      const int n = static_cast<int>(std::min<int64_t>(segment_, length(r) - j * segment_));
      const int rc = MPI_Irecv(into + j * segment_ * element_, n, plan_.type, prev, plan_.tag, plan_.comm,
                               &recvs_[static_cast<size_t>(j)]);
      if (rc != MPI_SUCCESS)
        return strformat("MPI (ring step %d): %s", step + 1, mpi_error_string(rc).c_str());
    }
    for (int64_t j = 0; j < send_segments; ++j) {
      const int n = static_cast<int>(std::min<int64_t>(segment_, length(s) - j * segment_));
      const int rc = MPI_Isend(from + j * segment_ * element_, n, plan_.type, next, plan_.tag, plan_.comm,
                               &sends_[static_cast<size_t>(j)]);
      if (rc != MPI_SUCCESS)
        return strformat("MPI (ring step %d): %s", step + 1, mpi_error_string(rc).c_str());
    }
    return {};
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

  const RingPlan plan_;
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
  const ReduceOp op_;
  const std::shared_ptr<ScratchPool> pool_;
  std::vector<uint8_t> scratch_;
  std::vector<MPI_Request> recvs_;  // of step_, one per segment
  std::vector<MPI_Request> sends_;
  std::vector<int> indices_;
  int pending_recvs_ = 0;
  int step_ = 0;
};

}  // namespace

std::shared_ptr<Work> start_ring_all_reduce(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
                                            const RingPlan& plan, const Buffer& input, const Buffer& output,
                                            ReduceOp op, std::shared_ptr<ScratchPool> pool) {
  auto work = std::make_shared<RingAllReduceWork>(std::move(state), std::move(info), timeout_ms, plan, input,
                                                  output, op, std::move(pool));
  const std::string problem = work->start();
  if (!problem.empty()) work->start_failed(problem);
  return work;
}

}  // namespace accel::comm
