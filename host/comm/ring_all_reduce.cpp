// The ring all_reduce (see ring_all_reduce.h). With n ranks, rank r and
// chunk k = [begin(k), begin(k) + length(k)):
//   reduce-scatter, step s = 0 .. n-2: send chunk (r - s) to r+1, receive
//     chunk (r - s - 1) from r-1 into scratch and combine it into the output;
//     afterwards rank r holds the full reduction of chunk (r + 1).
//   all-gather, step t = 0 .. n-2: send chunk (r - t + 1), receive chunk
//     (r - t) straight into the output.
// A step's receive is posted before its send; the next step is posted as
// soon as the current one completed, inside the same poll.
#include "host/comm/ring_all_reduce.h"

#include <cstring>

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
                    const Buffer& output, ReduceOp op, std::shared_ptr<ScratchPool> pool)
      : Work(std::move(state), std::move(info), timeout_ms),
        plan_(plan),
        output_(static_cast<uint8_t*>(output.data)),
        count_(output.count),
        dtype_(output.dtype),
        element_(dtype_size(output.dtype)),
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
      int flag = 0;
      const int rc = MPI_Testall(2, requests_, &flag, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        *error = strformat("MPI (ring step %d of %d): %s", step_ + 1, last, mpi_error_string(rc).c_str());
        return Progress::failed;
      }
      if (!flag) return Progress::pending;
      if (step_ < plan_.size - 1) {
        // A reduce-scatter step: combine the received chunk into ours.
        const int k = recv_chunk(step_);
        reduce_local(scratch_.data(), output_ + begin(k) * element_, length(k), dtype_, op_);
      }
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

  int send_chunk(int step) const {
    return step < plan_.size - 1 ? mod(plan_.rank - step) : mod(plan_.rank - (step - (plan_.size - 1)) + 1);
  }
  int recv_chunk(int step) const {
    return step < plan_.size - 1 ? mod(plan_.rank - step - 1) : mod(plan_.rank - (step - (plan_.size - 1)));
  }

  std::string post(int step) {
    const int next = mod(plan_.rank + 1);
    const int prev = mod(plan_.rank - 1);
    const int r = recv_chunk(step);
    const int s = send_chunk(step);
    // Reduce-scatter receives into scratch (combined on completion);
    // all-gather receives the finished chunk in place.
    void* into = step < plan_.size - 1 ? static_cast<void*>(scratch_.data()) : output_ + begin(r) * element_;
    int rc = MPI_Irecv(into, static_cast<int>(length(r)), plan_.type, prev, plan_.tag, plan_.comm, &requests_[0]);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Isend(output_ + begin(s) * element_, static_cast<int>(length(s)), plan_.type, next, plan_.tag,
                     plan_.comm, &requests_[1]);
    }
    if (rc != MPI_SUCCESS) return strformat("MPI (ring step %d): %s", step + 1, mpi_error_string(rc).c_str());
    return {};
  }

  // Receives are cancelled, sends freed: point-to-point requests may be.
  void release_requests() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (requests_[0] != MPI_REQUEST_NULL) {
      MPI_Cancel(&requests_[0]);
      MPI_Request_free(&requests_[0]);
    }
    if (requests_[1] != MPI_REQUEST_NULL) MPI_Request_free(&requests_[1]);
  }

  const RingPlan plan_;
  uint8_t* const output_;
  const int64_t count_;
  const DType dtype_;
  const size_t element_;
  const ReduceOp op_;
  const std::shared_ptr<ScratchPool> pool_;
  std::vector<uint8_t> scratch_;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // [recv, send] of step_
  int step_ = 0;
};

}  // namespace

std::shared_ptr<Work> start_ring_all_reduce(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
                                            const RingPlan& plan, const Buffer& input, const Buffer& output,
                                            ReduceOp op, std::shared_ptr<ScratchPool> pool) {
  auto work = std::make_shared<RingAllReduceWork>(std::move(state), std::move(info), timeout_ms, plan, output, op,
                                                  std::move(pool));
  if (input.data != output.data) std::memcpy(output.data, input.data, output.bytes());
  const std::string problem = work->start();
  if (!problem.empty()) work->start_failed(problem);
  return work;
}

}  // namespace accel::comm
