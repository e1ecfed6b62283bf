// The collective sequence check (see sequence_check.h). Messages are a fixed
// header plus packed descriptors, sent with MPI_Isend to the ring successor;
// one MPI_Irecv from the predecessor is always posted (sized for the largest
// message), so a waiting rank only has to MPI_Test it.
#include "host/comm/sequence_check.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "host/comm/mpi_communicator.h"
#include "host/util/strformat.h"

namespace accel::comm {
namespace {

constexpr int kTag = 7;
constexpr size_t kLabelBytes = 48;

struct WireHeader {
  int32_t kind;
  int32_t listed;
  int64_t step;
  int64_t count;
  uint64_t hash;
};

struct WireOp {
  int32_t op, dtype, reduce, peer;
  int64_t count;
  char label[kLabelBytes];
};

constexpr size_t kMaxMessage = sizeof(WireHeader) + sizeof(WireOp) * SequenceCheck::kMaxListed;

}  // namespace

PeerFailed::PeerFailed(int failed_rank, std::string failed_in, int64_t failed_step)
    : CommError(ErrorCode::aborted, strformat("rank %d failed in %s at step %lld: see its line", failed_rank,
                                              failed_in.c_str(), static_cast<long long>(failed_step + 1))),
      world_rank(failed_rank),
      where(std::move(failed_in)),
      step(failed_step) {}

std::string describe_op(const OpDescriptor& d) {
  std::string text = op_name(d.op);
  if (!d.label.empty()) text += " '" + d.label + "'";
  text += strformat(" (%s x%lld", dtype_name(d.dtype), static_cast<long long>(d.count));
  if (d.reduce >= 0) text += std::string(", ") + reduce_op_name(static_cast<ReduceOp>(d.reduce));
  if (d.peer >= 0) text += strformat(", %s %d", d.op == OpType::broadcast ? "root" : "peer", d.peer);
  return text + ")";
}

uint64_t fold_op(uint64_t hash, const OpDescriptor& d) {
  if (hash == 0) hash = 1469598103934665603ull;  // FNV offset basis
  const int64_t fields[] = {static_cast<int64_t>(d.op), static_cast<int64_t>(d.dtype), d.count, d.reduce,
                            d.op == OpType::broadcast ? d.peer : -1};
  for (int64_t field : fields) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= static_cast<uint64_t>(field >> (8 * byte)) & 0xffu;
      hash *= 1099511628211ull;  // FNV prime
    }
  }
  return hash;
}

SequenceCheck::SequenceCheck(MPI_Comm comm, std::string group_name, std::vector<int> world_ranks,
                             int64_t timeout_ms, bool verify_each_op)
    : group_name_(std::move(group_name)),
      world_ranks_(std::move(world_ranks)),
      timeout_ms_(timeout_ms),
      verify_each_op_(verify_each_op) {
  MPI_Comm_size(comm, &size_);
  MPI_Comm_rank(comm, &rank_);
  if (size_ < 2) return;
  comm_ = duplicate_with_deadline(comm, timeout_ms_, "creating the sequence check of group '" + group_name_ + "'");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  recv_buffer_.resize(kMaxMessage);
  std::lock_guard<std::mutex> lock(mu_);
  post_receive_locked();
}

SequenceCheck::~SequenceCheck() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || comm_ == MPI_COMM_NULL) return;
  if (recv_request_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&recv_request_);
    MPI_Request_free(&recv_request_);
  }
  for (Outgoing& o : outgoing_) {
    if (o.request != MPI_REQUEST_NULL) MPI_Request_free(&o.request);  // delivered or dropped: MPI keeps the data
  }
  MPI_Comm_free(&comm_);
}

std::string SequenceCheck::rank_name(int group_rank) const {
  const int world = group_rank < static_cast<int>(world_ranks_.size()) ? world_ranks_[group_rank] : group_rank;
  return strformat("rank %d", world);
}

void SequenceCheck::post_receive_locked() {
  const int predecessor = (rank_ + size_ - 1) % size_;
  MPI_Irecv(recv_buffer_.data(), static_cast<int>(recv_buffer_.size()), MPI_BYTE, predecessor, kTag, comm_,
            &recv_request_);
}

void SequenceCheck::pump_locked() {
  for (;;) {
    if (recv_request_ == MPI_REQUEST_NULL) return;
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&recv_request_, &done, &status) != MPI_SUCCESS || !done) return;
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    Record r;
    WireHeader h{};
    if (bytes >= static_cast<int>(sizeof h)) {
      std::memcpy(&h, recv_buffer_.data(), sizeof h);
      r.kind = static_cast<Kind>(h.kind);
      r.step = h.step;
      r.count = h.count;
      r.hash = h.hash;
      const int listed = std::clamp<int>(h.listed, 0, kMaxListed);
      for (int i = 0; i < listed && sizeof h + (i + 1) * sizeof(WireOp) <= static_cast<size_t>(bytes); ++i) {
        WireOp w{};
        std::memcpy(&w, recv_buffer_.data() + sizeof h + i * sizeof(WireOp), sizeof w);
        OpDescriptor d;
        d.op = static_cast<OpType>(w.op);
        d.dtype = static_cast<DType>(w.dtype);
        d.reduce = w.reduce;
        d.peer = w.peer;
        d.count = w.count;
        d.label.assign(w.label, strnlen(w.label, kLabelBytes));
        r.ops.push_back(std::move(d));
      }
    }
    inbox_.push_back(std::move(r));
    post_receive_locked();
  }
}

void SequenceCheck::send(const Record& record) {
  Outgoing out;
  const size_t listed = std::min<size_t>(record.ops.size(), kMaxListed);
  out.bytes.resize(sizeof(WireHeader) + listed * sizeof(WireOp));
  const WireHeader h{record.kind, static_cast<int32_t>(listed), record.step, record.count, record.hash};
  std::memcpy(out.bytes.data(), &h, sizeof h);
  for (size_t i = 0; i < listed; ++i) {
    const OpDescriptor& d = record.ops[i];
    WireOp w{};
    w.op = static_cast<int32_t>(d.op);
    w.dtype = static_cast<int32_t>(d.dtype);
    w.reduce = d.reduce;
    w.peer = d.peer;
    w.count = d.count;
    std::strncpy(w.label, d.label.c_str(), kLabelBytes - 1);
    std::memcpy(out.bytes.data() + sizeof h + i * sizeof(WireOp), &w, sizeof w);
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Reap sends that completed (the successor received them).
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? outgoing_.erase(it) : std::next(it);
  }
  outgoing_.push_back(std::move(out));
  Outgoing& sent = outgoing_.back();
  const int successor = (rank_ + 1) % size_;
  const int rc = MPI_Isend(sent.bytes.data(), static_cast<int>(sent.bytes.size()), MPI_BYTE, successor, kTag,
                           comm_, &sent.request);
  if (rc != MPI_SUCCESS) {
    throw CommError(ErrorCode::internal, "sequence check of group '" + group_name_ + "': MPI_Isend: " +
                                             mpi_error_string(rc));
  }
}

SequenceCheck::Record SequenceCheck::next(const std::string& waiting_for) {
  const auto start = SteadyClock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms_ > 0 ? timeout_ms_ : 1800 * 1000);
  int64_t sleep_us = 20;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pump_locked();
      throw_if_failure_locked();
      if (!inbox_.empty()) {
        Record r = std::move(inbox_.front());
        inbox_.pop_front();
        return r;
      }
    }
    const auto now = SteadyClock::now();
    if (now >= deadline) {
      // Worded as every operation's deadline is (work.cpp): this receive is
      // the operation the rank waits in, so it is the one named (a peer that
      // died after the step's last collective is met here, not elsewhere).
      const int predecessor = (rank_ + size_ - 1) % size_;
      throw CommError(ErrorCode::timeout,
                      strformat("%s (rank %d of %d in group '%s'): recv 'sequence check: %s' from peer %d (world "
                                "%s) did not complete within %lld ms; the peer did not send it (stuck, exited or out "
                                "of order)",
                                rank_name(rank_).c_str(), rank_, size_, group_name_.c_str(), waiting_for.c_str(),
                                predecessor, rank_name(predecessor).c_str(), static_cast<long long>(timeout_ms_)));
    }
    if (now - start < std::chrono::milliseconds(100)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min<int64_t>(sleep_us * 2, 1000);
    }
  }
}

void SequenceCheck::diverged(int64_t step, const std::string& detail) const {
  throw CommError(ErrorCode::aborted,
                  strformat("%s: collective sequence diverged at step %lld in group '%s': %s",
                            rank_name(rank_).c_str(), static_cast<long long>(step), group_name_.c_str(),
                            detail.c_str()));
}

void SequenceCheck::before_op(const OpDescriptor& d, int64_t step) {
  if (!active()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    ++count_;
    hash_ = fold_op(hash_, d);
    if (listed_.size() < static_cast<size_t>(kMaxListed)) listed_.push_back(d);
    last_ = d;
  }
  if (!verify_each_op_) return;
  Record mine;
  mine.kind = kOp;
  mine.step = step;
  mine.count = count_;
  mine.ops.push_back(d);
  send(mine);
  const Record theirs = next(strformat("its collective %lld", static_cast<long long>(count_)));
  const std::string pred = rank_name((rank_ + size_ - 1) % size_);
  const std::string here = strformat("%s's collective %lld of the step is %s", rank_name(rank_).c_str(),
                                     static_cast<long long>(count_), describe_op(d).c_str());
  if (theirs.kind == kStepEnd) {
    diverged(step, strformat("%s, but %s ended the step after %lld", here.c_str(), pred.c_str(),
                             static_cast<long long>(theirs.count)));
  }
  if (theirs.step != step || theirs.count != count_ || theirs.ops.empty() || !theirs.ops[0].same_shape(d)) {
    diverged(step, strformat("%s, but %s's collective %lld of step %lld is %s", here.c_str(), pred.c_str(),
                             static_cast<long long>(theirs.count), static_cast<long long>(theirs.step),
                             theirs.ops.empty() ? "unknown" : describe_op(theirs.ops[0]).c_str()));
  }
}

void SequenceCheck::compare_step(const Record& theirs, int64_t step, bool at_step_end) const {
  const std::string pred = rank_name((rank_ + size_ - 1) % size_);
  const std::string me = rank_name(rank_);
  // The first listed collective whose shape differs, and the first whose label does.
  const size_t common = std::min(listed_.size(), theirs.ops.size());
  size_t first_shape = common, first_label = common;
  for (size_t i = 0; i < common; ++i) {
    if (first_shape == common && !listed_[i].same_shape(theirs.ops[i])) first_shape = i;
    if (first_label == common && listed_[i].label != theirs.ops[i].label) first_label = i;
  }
  std::string labels;
  if (first_label < first_shape && first_label < common) {
    labels = strformat("; their labels first differ at collective %zu: %s here, %s on %s", first_label + 1,
                       describe_op(listed_[first_label]).c_str(), describe_op(theirs.ops[first_label]).c_str(),
                       pred.c_str());
  }
  if (first_shape < common) {
    diverged(step, strformat("%s's collective %zu of the step is %s, but %s's is %s%s", me.c_str(), first_shape + 1,
                             describe_op(listed_[first_shape]).c_str(), pred.c_str(),
                             describe_op(theirs.ops[first_shape]).c_str(), labels.c_str()));
  }
  const std::string their_last =
      theirs.ops.empty() ? std::string("none")
                         : (theirs.count <= kMaxListed ? describe_op(theirs.ops.back()) : std::string("not listed"));
  if (theirs.count < count_) {
    const std::string mine = static_cast<size_t>(theirs.count) < listed_.size()
                                 ? describe_op(listed_[static_cast<size_t>(theirs.count)])
                                 : describe_op(last_);
    diverged(step, strformat("%s issued %s as collective %lld of the step, but %s ended the step after %lld "
                             "(its last: %s)%s",
                             me.c_str(), mine.c_str(), static_cast<long long>(theirs.count + 1), pred.c_str(),
                             static_cast<long long>(theirs.count), their_last.c_str(), labels.c_str()));
  }
  if (!at_step_end) return;
  if (theirs.count > count_) {
    const std::string theirs_next = static_cast<size_t>(count_) < theirs.ops.size()
                                        ? describe_op(theirs.ops[static_cast<size_t>(count_)])
                                        : std::string("one not listed");
    diverged(step, strformat("%s issued %s as collective %lld of the step, but %s ended the step after %lld "
                             "(its last: %s)%s",
                             pred.c_str(), theirs_next.c_str(), static_cast<long long>(count_ + 1), me.c_str(),
                             static_cast<long long>(count_), count_ == 0 ? "none" : describe_op(last_).c_str(),
                             labels.c_str()));
  }
  if (theirs.hash != hash_) {
    diverged(step, strformat("%s and %s issued %lld collectives each, but they differ after the %d listed (hashes "
                             "%016llx and %016llx)",
                             me.c_str(), pred.c_str(), static_cast<long long>(count_), kMaxListed,
                             static_cast<unsigned long long>(hash_), static_cast<unsigned long long>(theirs.hash)));
  }
}

void SequenceCheck::throw_if_failure_locked() const {
  for (const Record& r : inbox_) {
    if (r.kind == kFailed) throw PeerFailed(static_cast<int>(r.count), r.ops.empty() ? "?" : r.ops[0].label, r.step);
  }
}

void SequenceCheck::announce_failure(int failed_rank, const std::string& where, int64_t step) {
  if (!active()) return;
  const int successor = (rank_ + 1) % size_;
  if (world_ranks_.at(static_cast<size_t>(successor)) == failed_rank) return;
  Record failure;
  failure.kind = kFailed;
  failure.step = step;
  failure.count = failed_rank;
  OpDescriptor what;
  what.label = where;
  failure.ops.push_back(std::move(what));
  send(failure);
}

void SequenceCheck::poll() {
  if (!active()) return;
  std::unique_lock<std::mutex> lock(mu_);
  pump_locked();
  throw_if_failure_locked();
  for (const Record& r : inbox_) {
    if (r.kind == kStepEnd && r.step == step_) {
      const Record copy = r;
      const int64_t step = step_;
      lock.unlock();
      compare_step(copy, step, /*at_step_end=*/false);
      return;
    }
  }
}

void SequenceCheck::end_step(int64_t step) {
  if (!active()) return;
  Record mine;
  mine.kind = kStepEnd;
  mine.step = step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    mine.count = count_;
    mine.hash = hash_;
    mine.ops = listed_;
  }
  send(mine);
  const Record theirs = next(strformat("the end of step %lld", static_cast<long long>(step)));
  const std::string pred = rank_name((rank_ + size_ - 1) % size_);
  if (theirs.kind == kOp) {
    diverged(step, strformat("%s issued %s as collective %lld of the step, but %s ended the step after %lld "
                             "(its last: %s)",
                             pred.c_str(), theirs.ops.empty() ? "?" : describe_op(theirs.ops[0]).c_str(),
                             static_cast<long long>(theirs.count), rank_name(rank_).c_str(),
                             static_cast<long long>(count_), count_ == 0 ? "none" : describe_op(last_).c_str()));
  }
  if (theirs.step != step) {
    diverged(step, strformat("%s ended step %lld while %s ended step %lld", pred.c_str(),
                             static_cast<long long>(theirs.step), rank_name(rank_).c_str(),
                             static_cast<long long>(step)));
  }
  compare_step(theirs, step, /*at_step_end=*/true);
  std::lock_guard<std::mutex> lock(mu_);
  count_ = 0;
  hash_ = 0;
  listed_.clear();
  last_ = OpDescriptor{};
}

}  // namespace accel::comm
