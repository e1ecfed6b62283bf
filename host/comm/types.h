// The vocabulary of the communication layer: element types, reduction
// operators, raw buffers, per-communicator and per-operation options, and the
// status values every operation reports. No LibTorch and no CUDA types here:
// a tensor reaches this layer as pointer + element count + dtype + device, so
// the services table (a DLTensor view) and the benchmarks (malloc'd memory)
// meet it the same way.
//
// Status codes keep the numeric values of the ABI's AccelStatus
// (abi/accel/status.h), so the services wrapper maps them one to one;
// tests/comm/types_test.cpp pins that. All types here are plain values;
// thread-safety is that of the values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace accel::comm {

// ---------------------------------------------------------------- dtypes --

// f8_e4m3 is the OCP E4M3FN format (max 448, no infinity; torch.float8_e4m3fn,
// ncclFloat8e4m3); f8_e5m2 is OCP E5M2 (max 57344, has infinity).
enum class DType : int { f32, f64, f16, bf16, i8, u8, i32, i64, f8_e4m3, f8_e5m2 };

inline constexpr int kNumDTypes = 10;

// Bytes per element; 0 for a value outside the enum.
size_t dtype_size(DType dtype);
// "f32", "bf16", "f8_e4m3", ...; "invalid" outside the enum.
const char* dtype_name(DType dtype);
bool dtype_valid(DType dtype);
bool dtype_is_integer(DType dtype);
// f16, bf16 and both FP8 formats: MPI has no type for them, so the MPI
// backend reduces them with its own operators (mpi_datatypes.h).
bool dtype_is_low_precision_float(DType dtype);

// ---------------------------------------------------------- reductions --

// avg is sum followed by a division by the group size, in the element type
// (fp32 for the low-precision floats). Integer avg is rejected as c10d does:
// integer division would silently truncate.
enum class ReduceOp : int { sum, avg, max, min };

const char* reduce_op_name(ReduceOp op);
bool reduce_op_valid(ReduceOp op);

// ------------------------------------------------------------- buffers --

// A borrowed, contiguous run of `count` elements. The memory must stay valid
// (and, for outputs, untouched) until the operation using it completed: for a
// synchronous call, until it returns; for an asynchronous one, until the wait
// or test that observed completion.
struct Buffer {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::f32;
  bool on_cuda = false;  // device memory of CUDA device `device`
  int device = 0;        // ignored for host memory

  size_t bytes() const { return static_cast<size_t>(count) * dtype_size(dtype); }
};

inline Buffer host_buffer(void* data, int64_t count, DType dtype) {
  return Buffer{data, count, dtype, false, 0};
}

// ------------------------------------------------------------- status --

// Values equal AccelStatus's ACCEL_OK / ACCEL_ERROR_* of the same name.
enum class ErrorCode : int {
  ok = 0,
  invalid_argument = 2,
  unsupported = 5,
  failed_precondition = 6,
  timeout = 8,
  aborted = 9,
  internal = 10,
};

// "ACCEL_OK", "ACCEL_ERROR_TIMEOUT", ... (the ABI's names).
const char* error_code_name(ErrorCode code);

// The outcome of an operation: ok, or a code and one line naming the rank,
// the operation and the cause.
struct Status {
  ErrorCode code = ErrorCode::ok;
  std::string message;

  bool ok() const { return code == ErrorCode::ok; }
  static Status error(ErrorCode code, std::string message) { return Status{code, std::move(message)}; }
  // "ACCEL_ERROR_TIMEOUT: rank 1: all_reduce #3 ..." (for logs).
  std::string to_string() const;
};

// Thrown where no work handle can carry the error: constructing a
// communicator, creating or splitting a process group.
class CommError : public std::runtime_error {
 public:
  CommError(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// ------------------------------------------------------------ options --

// Which backend moves CUDA buffers (InitProcessGroupKwargs' `backend`). Host
// buffers always move through MPI. auto_select: NCCL when a CUDA device is
// present; nccl: NCCL, and creating the group fails without a device; mpi:
// CUDA buffers are rejected (Open MPI here is not CUDA-aware).
enum class Backend : int { auto_select, mpi, nccl };

const char* backend_name(Backend backend);

// Per communicator; children of a process group inherit their parent's.
struct CommOptions {
  // Deadline of every operation, from its issue (InitProcessGroupKwargs'
  // `timeout`, whose default is 1800 s).
  int64_t timeout_ms = 1800 * 1000;
  Backend backend = Backend::auto_select;
  // Ring buffer of the last N operations (0 disables it).
  size_t flight_recorder_entries = 2000;
  // Where the recorder is written on the first failure; empty: to the log
  // (its last 32 entries only).
  std::string flight_recorder_dir;
  // The watchdog ends the whole job (abort_all) when an operation of this
  // communicator failed or timed out and the caller has not ended the run
  // itself within abort_grace_ms. Off in tests that inspect the failure.
  bool abort_on_failure = true;
  int64_t abort_grace_ms = 2000;
  // What "ends the job" means; empty: abort_all (abort.h). A seam for tests.
  std::function<void(const std::string& reason)> fatal_handler;
  int64_t watchdog_period_ms = 100;
  // A waiter polls MPI_Test (yielding the core in between) this long before it
  // starts sleeping: Open MPI only progresses a non-blocking collective
  // inside MPI calls, so sleeping early would slow every large transfer.
  int64_t busy_poll_ms = 1000;
  // MPI backend: an all_reduce of at least this many bytes runs as a ring of
  // point-to-point steps (ring_collectives.h) instead of MPI_Iallreduce.
  // SIZE_MAX: never; 0: whenever the count is at least the group size.
  size_t ring_all_reduce_min_bytes = 64 * 1024;
  // The same for an out-of-place reduce_scatter whose input (n chunks) is
  // at least this many bytes, instead of MPI_Ireduce_scatter_block: the ring
  // measured 40-75% faster from 1 MiB at 2 and 4 ranks.
  size_t ring_reduce_scatter_min_bytes = 1024 * 1024;
  // And for an all_gather whose output is in [ring_all_gather_min_bytes,
  // ring_all_gather_max_bytes] on a group of at most ring_all_gather_max_ranks
  // ranks. On 2 ranks the ring is one exchange, as the blocking
  // MPI_Allgather's, and ran 30-46% faster than MPI_Iallgather from 64 KiB
  // to 1 MiB, even to 4 MiB, slower above; on 4 ranks sharing 2 cores its
  // n-1 dependent steps lost to MPI_Iallgather at most sizes
  // (docs/communication.md, "Benchmarks").
  size_t ring_all_gather_min_bytes = 64 * 1024;
  size_t ring_all_gather_max_bytes = 4 * 1024 * 1024;
  int ring_all_gather_max_ranks = 2;
  // The ring moves each chunk in segments of this many bytes, so reducing
  // one overlaps the transfer of the next.
  size_t ring_segment_bytes = 1024 * 1024;
  // A reducing ring step keeps at most this many segment receives posted,
  // so a ring's receive scratch is this many segments rather than a chunk
  // (ring_collectives.cpp). Four keep a segment landing while the one
  // before it is combined.
  int ring_receive_window_segments = 4;
  // The node (0 .. nodes-1) of each world rank, as MpiSession found it; a
  // communicator reads its members' nodes from it. Null or empty: every rank
  // on one node. Groups spanning nodes count the bytes each rank sends inside
  // and across nodes (link_bytes.h) and may all-reduce hierarchically.
  std::shared_ptr<const std::vector<int>> world_nodes;
  // An all_reduce on the ring path over a group that spans nodes, with the
  // same number (at least 2) of its ranks on every node, runs in three rings
  // (ring_collectives.h): reduce-scatter inside each node, all-reduce of each
  // rank's share across nodes, all-gather inside the node. Each rank then
  // sends 2(m-1)/m x S/l across nodes (m nodes, l ranks each) instead of up
  // to 2(n-1)/n x S. false: the flat ring.
  bool hierarchical_all_reduce = true;
};

// Per operation.
struct OpOptions {
  int64_t timeout_ms = 0;       // 0: the communicator's CommOptions::timeout_ms
  std::string_view label = {};  // for the flight recorder and messages; copied
  void* cuda_stream = nullptr;  // NCCL: the operation runs after the work
                                // already enqueued on this cudaStream_t
                                // (nullptr: the legacy default stream)
};

}  // namespace accel::comm
