// The communicator interface (c10d's Backend): every operation exists in an
// asynchronous form returning a Work handle, and a synchronous form that is
// that handle's wait(). Backends: MpiCommunicator (host memory) and the NCCL
// communicator (CUDA memory); ProcessGroup dispatches between them by buffer.
//
// Contract shared by every backend:
//  - Every rank of the communicator issues the same collectives in the same
//    order (send/recv pair up per peer, in order).
//  - Errors travel as values: an invalid request returns a Work that already
//    failed (ACCEL_ERROR_INVALID_ARGUMENT / UNSUPPORTED) with a message naming
//    the rank, the operation and the problem; nothing throws for them.
//  - Shapes: all_reduce any count (input and output equal); all_gather
//    output = size * input elements, rank r's input lands at r * input.count;
//    reduce_scatter input = size * output elements, chunk r goes to rank r;
//    all_to_all input and output of equal count divisible by size; chunk j of
//    rank i's input lands in chunk i of rank j's output. A count that does
//    not divide is rejected, never padded silently.
//  - In place: all_reduce with input == output; all_gather with input at
//    output + rank * input.count; reduce_scatter with output at
//    input + rank * output.count (this rank's own chunk, as NCCL takes it;
//    the other chunks of the input are unspecified afterwards). Any other
//    overlap of a reduce_scatter's input and output is rejected.
//  - avg is rejected for integer dtypes (as c10d does).
//
// Thread-safety: operations are issued from one thread at a time (the loop
// thread); Work handles may be waited on from any thread.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "host/comm/flight_recorder.h"
#include "host/comm/types.h"
#include "host/comm/work.h"

namespace accel::comm {

// One send or recv of a batch (batch_p2p): issued together, so a pipeline
// stage may send to and receive from the same peer in any order.
struct P2POp {
  enum class Kind { send, recv };
  Kind kind = Kind::send;
  Buffer buffer;
  int peer = 0;  // group rank
  int tag = 0;   // MPI matches tags; NCCL has none and keeps per-peer order
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "nccl", "group"
  // The first failure of any operation, once one failed or timed out.
  virtual std::optional<Status> failure() const = 0;
  virtual const FlightRecorder& flight_recorder() const = 0;

  // ---------------------------------------------------- asynchronous forms --
  virtual std::shared_ptr<Work> all_reduce_async(const Buffer& input, const Buffer& output, ReduceOp op,
                                                 const OpOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> all_gather_async(const Buffer& input, const Buffer& output,
                                                 const OpOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> reduce_scatter_async(const Buffer& input, const Buffer& output, ReduceOp op,
                                                     const OpOptions& options = {}) = 0;
  // In place: `buffer` of rank `root` is copied into `buffer` everywhere.
  virtual std::shared_ptr<Work> broadcast_async(const Buffer& buffer, int root,
                                                const OpOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> all_to_all_async(const Buffer& input, const Buffer& output,
                                                 const OpOptions& options = {}) = 0;
  // Uneven all-to-all: this rank sends send_counts[j] elements to rank j and
  // receives recv_counts[j] from it, each side's chunks packed in rank order
  // (the displacements are the counts' prefix sums). One count per rank of
  // the group, each >= 0; the input holds sum(send_counts) elements, the
  // output sum(recv_counts), and they do not overlap. Rank i's send count to
  // j must be j's receive count from i: a chunk of another length fails the
  // operation on the receiver, naming the peer. Zero counts are allowed.
  virtual std::shared_ptr<Work> all_to_all_v_async(const Buffer& input, std::span<const int64_t> send_counts,
                                                   const Buffer& output, std::span<const int64_t> recv_counts,
                                                   const OpOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> send_async(const Buffer& input, int peer, int tag,
                                           const OpOptions& options = {}) = 0;
  // Receives exactly output.count elements; a message of another length fails.
  virtual std::shared_ptr<Work> recv_async(const Buffer& output, int peer, int tag,
                                           const OpOptions& options = {}) = 0;
  // One Work for the whole batch; every buffer on the same kind of device.
  virtual std::shared_ptr<Work> batch_p2p_async(std::span<const P2POp> ops,
                                                const OpOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> barrier_async(const OpOptions& options = {}) = 0;

  // ----------------------------------------------------- synchronous forms --
  // Each is the asynchronous form followed by wait(): it returns when the
  // operation completed, failed, or ran out of its timeout.
  Status all_reduce(const Buffer& input, const Buffer& output, ReduceOp op, const OpOptions& options = {}) {
    return all_reduce_async(input, output, op, options)->wait();
  }
  Status all_reduce(const Buffer& buffer, ReduceOp op, const OpOptions& options = {}) {
    return all_reduce_async(buffer, buffer, op, options)->wait();
  }
  Status all_gather(const Buffer& input, const Buffer& output, const OpOptions& options = {}) {
    return all_gather_async(input, output, options)->wait();
  }
  Status reduce_scatter(const Buffer& input, const Buffer& output, ReduceOp op,
                        const OpOptions& options = {}) {
    return reduce_scatter_async(input, output, op, options)->wait();
  }
  Status broadcast(const Buffer& buffer, int root, const OpOptions& options = {}) {
    return broadcast_async(buffer, root, options)->wait();
  }
  Status all_to_all(const Buffer& input, const Buffer& output, const OpOptions& options = {}) {
    return all_to_all_async(input, output, options)->wait();
  }
  Status all_to_all_v(const Buffer& input, std::span<const int64_t> send_counts, const Buffer& output,
                      std::span<const int64_t> recv_counts, const OpOptions& options = {}) {
    return all_to_all_v_async(input, send_counts, output, recv_counts, options)->wait();
  }
  Status send(const Buffer& input, int peer, int tag = 0, const OpOptions& options = {}) {
    return send_async(input, peer, tag, options)->wait();
  }
  Status recv(const Buffer& output, int peer, int tag = 0, const OpOptions& options = {}) {
    return recv_async(output, peer, tag, options)->wait();
  }
  Status batch_p2p(std::span<const P2POp> ops, const OpOptions& options = {}) {
    return batch_p2p_async(ops, options)->wait();
  }
  Status barrier(const OpOptions& options = {}) { return barrier_async(options)->wait(); }
};

// ------------------------------------------------------------ validation --
// Shared by the backends, so both reject the same requests with the same
// words. Each returns OK when the request is valid, else the code
// (INVALID_ARGUMENT, or UNSUPPORTED for a valid request no backend does) and
// the problem; the caller prefixes the rank and operation. `size` is the
// group size.
namespace validate {

Status buffer(const char* role, const Buffer& b);
Status reduction(ReduceOp op, DType dtype);
Status same_kind(const Buffer& a, const Buffer& b);
Status all_reduce(const Buffer& input, const Buffer& output, ReduceOp op);
Status all_gather(const Buffer& input, const Buffer& output, int size);
// `rank`: this rank's index in the group (where an in-place output must sit).
Status reduce_scatter(const Buffer& input, const Buffer& output, ReduceOp op, int rank, int size);
// Whether a reduce_scatter's output is this rank's chunk of its input.
bool reduce_scatter_in_place(const Buffer& input, const Buffer& output, int rank);
Status all_to_all(const Buffer& input, const Buffer& output, int size);
Status all_to_all_v(const Buffer& input, std::span<const int64_t> send_counts, const Buffer& output,
                    std::span<const int64_t> recv_counts, int size);
Status rank_in_group(const char* role, int rank, int size);

}  // namespace validate

}  // namespace accel::comm
