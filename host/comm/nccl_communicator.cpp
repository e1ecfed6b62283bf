// The NCCL backend (see nccl_communicator.h). Compiled in every build; it
// runs only where a CUDA device exists. Without one, cuda_device_count says
// why and make_nccl_communicator fails on every member alike, before any
// NCCL call.
#include "host/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <mutex>
#include <thread>

#include "host/comm/mpi_communicator.h"
#include "host/comm/watchdog.h"
#include "host/util/strformat.h"

namespace accel::comm {
namespace {

std::string cuda_error(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CommError(ErrorCode::internal, std::string(what) + ": " + cuda_error(e));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
      return ncclUint8;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::f8_e4m3:
      return ncclFloat8e4m3;
    case DType::f8_e5m2:
      return ncclFloat8e5m2;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

// The communicator handle, shared by the communicator, its Works and its
// watchdog. Once aborted, nothing may call NCCL on it again.
struct NcclHandle {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::mutex mu;
  bool aborted = false;

  void abort() {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted || comm == nullptr) return;
    ncclCommAbort(comm);
    aborted = true;
  }

  // "" while healthy (or still working); the error otherwise.
  std::string async_error() {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted) return "the NCCL communicator was aborted";
    ncclResult_t result = ncclSuccess;
    ncclCommGetAsyncError(comm, &result);
    if (result == ncclSuccess || result == ncclInProgress) return {};
    return std::string("NCCL: ") + ncclGetErrorString(result) + ": " + ncclGetLastError(comm);
  }
};

// Polls a non-blocking communicator until the call that returned `result`
// has been taken in (ncclInProgress -> ncclSuccess), or the deadline.
ncclResult_t settle(ncclComm_t comm, ncclResult_t result, SteadyClock::time_point deadline) {
  while (result == ncclInProgress) {
    if (SteadyClock::now() >= deadline) return ncclInProgress;
    std::this_thread::yield();
    ncclCommGetAsyncError(comm, &result);
  }
  return result;
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
           std::shared_ptr<NcclHandle> handle, cudaEvent_t done)
      : Work(std::move(state), std::move(info), timeout_ms), handle_(std::move(handle)), done_(done) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  void start_failed(const std::string& detail) { fail_to_start(ErrorCode::internal, detail); }

  Status wait_stream(void* cuda_stream) override {
    if (finished()) return status();
    const cudaError_t e = cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda_stream), done_, 0);
    if (e != cudaSuccess)
      return Status::error(ErrorCode::internal, describe() + ": cudaStreamWaitEvent: " + cuda_error(e));
    return Status{};  // the watchdog still enforces the deadline
  }

 protected:
  Progress poll_locked(std::string* error) override {
    std::string problem = handle_->async_error();
    if (!problem.empty()) {
      *error = std::move(problem);
      return Progress::failed;
    }
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return Progress::done;
    if (e == cudaErrorNotReady) return Progress::pending;
    *error = "cudaEventQuery: " + cuda_error(e);
    return Progress::failed;
  }

  // A kernel waiting on a peer that never comes spins forever: abort it.
  void abandon_locked() override { handle_->abort(); }

 private:
  std::shared_ptr<NcclHandle> handle_;
  cudaEvent_t done_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclHandle> handle, cudaStream_t stream, void* scratch,
                   std::shared_ptr<CommState> state)
      : handle_(std::move(handle)), stream_(stream), scratch_(scratch), state_(std::move(state)) {
    std::shared_ptr<NcclHandle> h = handle_;
    watchdog_ = std::make_unique<Watchdog>(
        state_, [h] { return h->async_error(); }, [h] { h->abort(); });
  }

  ~NcclCommunicator() override {
    watchdog_.reset();
    cudaSetDevice(handle_->device);
    std::lock_guard<std::mutex> lock(handle_->mu);
    if (!handle_->aborted) {
      // Finalize flushes pending work; bounded, then abort if it hangs.
      const auto deadline = SteadyClock::now() + std::chrono::milliseconds(state_->resolve_timeout_ms(0));
      if (settle(handle_->comm, ncclCommFinalize(handle_->comm), deadline) == ncclSuccess) {
        ncclCommDestroy(handle_->comm);
        cudaFree(scratch_);
      } else {
        ncclCommAbort(handle_->comm);
      }
      handle_->aborted = true;
    }
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return state_->rank(); }
  int size() const override { return state_->size(); }
  const char* backend() const override { return "nccl"; }
  std::optional<Status> failure() const override {
    if (!state_->failed()) return std::nullopt;
    return state_->failure();
  }
  const FlightRecorder& flight_recorder() const override { return state_->recorder(); }

  std::shared_ptr<Work> all_reduce_async(const Buffer& in, const Buffer& out, ReduceOp op,
                                         const OpOptions& o) override {
    return launch(info(OpType::all_reduce, &in, -1, o), validate::all_reduce(in, out, op), {&in, &out}, o,
                  [&] {
                    return ncclAllReduce(in.data, out.data, static_cast<size_t>(in.count),
                                         nccl_type(in.dtype), nccl_op(op), handle_->comm, stream_);
                  });
  }
  std::shared_ptr<Work> all_gather_async(const Buffer& in, const Buffer& out, const OpOptions& o) override {
    return launch(info(OpType::all_gather, &in, -1, o), validate::all_gather(in, out, size()), {&in, &out}, o,
                  [&] {
                    return ncclAllGather(in.data, out.data, static_cast<size_t>(in.count),
                                         nccl_type(in.dtype), handle_->comm, stream_);
                  });
  }
  std::shared_ptr<Work> reduce_scatter_async(const Buffer& in, const Buffer& out, ReduceOp op,
                                             const OpOptions& o) override {
    return launch(info(OpType::reduce_scatter, &in, -1, o), validate::reduce_scatter(in, out, op, rank(), size()),
                  {&in, &out}, o, [&] {
                    return ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.count),
                                             nccl_type(in.dtype), nccl_op(op), handle_->comm, stream_);
                  });
  }
  std::shared_ptr<Work> broadcast_async(const Buffer& buf, int root, const OpOptions& o) override {
    Status problem = validate::buffer("buffer", buf);
    if (problem.ok()) problem = validate::rank_in_group("root", root, size());
    return launch(info(OpType::broadcast, &buf, root, o), problem, {&buf}, o, [&] {
      return ncclBroadcast(buf.data, buf.data, static_cast<size_t>(buf.count), nccl_type(buf.dtype), root,
                           handle_->comm, stream_);
    });
  }
  std::shared_ptr<Work> all_to_all_async(const Buffer& in, const Buffer& out, const OpOptions& o) override {
    Status problem = validate::all_to_all(in, out, size());
    if (problem.ok() && in.data == out.data && in.count > 0) {
      problem =
          Status::error(ErrorCode::unsupported, "in-place all_to_all is not supported by the NCCL backend");
    }
    return launch(info(OpType::all_to_all, &in, -1, o), problem, {&in, &out}, o, [&] {
      const size_t chunk = static_cast<size_t>(in.count / size());
      const size_t chunk_bytes = chunk * dtype_size(in.dtype);
      ncclGroupStart();
      for (int peer = 0; peer < size(); ++peer) {
        ncclSend(static_cast<const char*>(in.data) + peer * chunk_bytes, chunk, nccl_type(in.dtype), peer,
                 handle_->comm, stream_);
        ncclRecv(static_cast<char*>(out.data) + peer * chunk_bytes, chunk, nccl_type(in.dtype), peer,
                 handle_->comm, stream_);
      }
      return ncclGroupEnd();
    });
  }
  std::shared_ptr<Work> all_to_all_v_async(const Buffer& in, std::span<const int64_t> send_counts,
                                           const Buffer& out, std::span<const int64_t> recv_counts,
                                           const OpOptions& o) override {
    const Status problem = validate::all_to_all_v(in, send_counts, out, recv_counts, size());
    return launch(info(OpType::all_to_all_v, &in, -1, o), problem, {&in, &out}, o, [&] {
      const size_t element = dtype_size(in.dtype);
      size_t sent = 0, received = 0;
      ncclGroupStart();
      for (int peer = 0; peer < size(); ++peer) {
        // NCCL has no length check: the counts must agree (validated per
        // rank; the ranks' agreement is the caller's, as NCCL's own).
        const auto s = static_cast<size_t>(send_counts[static_cast<size_t>(peer)]);
        const auto r = static_cast<size_t>(recv_counts[static_cast<size_t>(peer)]);
        if (s > 0) {
          ncclSend(static_cast<const char*>(in.data) + sent * element, s, nccl_type(in.dtype), peer, handle_->comm,
                   stream_);
        }
        if (r > 0) {
          ncclRecv(static_cast<char*>(out.data) + received * element, r, nccl_type(in.dtype), peer, handle_->comm,
                   stream_);
        }
        sent += s;
        received += r;
      }
      return ncclGroupEnd();
    });
  }
  std::shared_ptr<Work> send_async(const Buffer& in, int peer, int, const OpOptions& o) override {
    Status problem = validate::buffer("input", in);
    if (problem.ok()) problem = validate::rank_in_group("peer", peer, size());
    return launch(info(OpType::send, &in, peer, o), problem, {&in}, o, [&] {
      return ncclSend(in.data, static_cast<size_t>(in.count), nccl_type(in.dtype), peer, handle_->comm,
                      stream_);
    });
  }
  std::shared_ptr<Work> recv_async(const Buffer& out, int peer, int, const OpOptions& o) override {
    Status problem = validate::buffer("output", out);
    if (problem.ok()) problem = validate::rank_in_group("peer", peer, size());
    return launch(info(OpType::recv, &out, peer, o), problem, {&out}, o, [&] {
      return ncclRecv(out.data, static_cast<size_t>(out.count), nccl_type(out.dtype), peer, handle_->comm,
                      stream_);
    });
  }
  std::shared_ptr<Work> batch_p2p_async(std::span<const P2POp> ops, const OpOptions& o) override {
    OpInfo i = info(OpType::batch_p2p, nullptr, -1, o);
    i.count = static_cast<int64_t>(ops.size());
    Status problem;
    std::vector<const Buffer*> buffers;
    for (const P2POp& op : ops) {
      if (problem.ok()) problem = validate::buffer("buffer", op.buffer);
      if (problem.ok()) problem = validate::rank_in_group("peer", op.peer, size());
      buffers.push_back(&op.buffer);
    }
    return launch(std::move(i), problem, buffers, o, [&] {
      ncclGroupStart();
      for (const P2POp& op : ops) {
        const size_t n = static_cast<size_t>(op.buffer.count);
        if (op.kind == P2POp::Kind::send) {
          ncclSend(op.buffer.data, n, nccl_type(op.buffer.dtype), op.peer, handle_->comm, stream_);
        } else {
          ncclRecv(op.buffer.data, n, nccl_type(op.buffer.dtype), op.peer, handle_->comm, stream_);
        }
      }
      return ncclGroupEnd();
    });
  }
  // A one-element all_reduce on a scratch buffer: every rank's stream passes
  // it only when every rank enqueued it.
  std::shared_ptr<Work> barrier_async(const OpOptions& o) override {
    return launch(info(OpType::barrier, nullptr, -1, o), Status{}, {}, o, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, handle_->comm, stream_);
    });
  }

 private:
  OpInfo info(OpType op, const Buffer* b, int peer, const OpOptions& o) const {
    OpInfo i;
    i.op = op;
    if (b) {
      i.dtype = b->dtype;
      i.count = b->count;
    }
    i.peer = peer;
    i.label = std::string(o.label);
    return i;
  }

  std::shared_ptr<Work> launch(OpInfo info, const Status& validation,
                               const std::vector<const Buffer*>& buffers, const OpOptions& options,
                               const std::function<ncclResult_t()>& enqueue) {
    if (!validation.ok())
      return Work::make_failed(state_, std::move(info), validation.code, validation.message);
    for (const Buffer* b : buffers) {
      if (!b->on_cuda || b->device != handle_->device) {
        return Work::make_failed(
            state_, std::move(info), ErrorCode::invalid_argument,
            strformat("the NCCL backend of this rank moves memory of CUDA device %d only", handle_->device));
      }
    }
    if (state_->failed()) {
      return Work::make_failed(state_, std::move(info), ErrorCode::aborted,
                               "the communicator failed earlier: " + state_->failure().message);
    }
    cudaSetDevice(handle_->device);
    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    auto work = std::make_shared<NcclWork>(state_, std::move(info), options.timeout_ms, handle_, done);
    // Our stream runs the operation after what the caller already enqueued.
    cudaEventRecord(ready, static_cast<cudaStream_t>(options.cuda_stream));
    cudaStreamWaitEvent(stream_, ready, 0);
    cudaEventDestroy(ready);
    const ncclResult_t result = settle(handle_->comm, enqueue(), work->deadline());
    if (result != ncclSuccess) {
      work->start_failed(result == ncclInProgress
                             ? std::string("NCCL did not accept the operation before its deadline")
                             : std::string("NCCL: ") + ncclGetErrorString(result) + ": " +
                                   ncclGetLastError(handle_->comm));
      state_->set_failed(work->status());
      return work;
    }
    cudaEventRecord(done, stream_);
    watchdog_->track(work);
    return work;
  }

  std::shared_ptr<NcclHandle> handle_;
  cudaStream_t stream_;
  void* scratch_;
  std::shared_ptr<CommState> state_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

int cuda_device_count(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for later callers
    if (why) *why = "cudaGetDeviceCount: " + cuda_error(e);
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device is visible";
  return count;
}

int nccl_runtime_version() {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? version : 0;
}

int nccl_header_version() { return NCCL_VERSION_CODE; }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm bootstrap, int local_rank,
                                                     std::string group_name, CommOptions options,
                                                     std::vector<int> world_ranks) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(bootstrap, &rank);
  MPI_Comm_size(bootstrap, &size);
  const int64_t timeout_ms = options.timeout_ms;
  const std::string where = "creating the NCCL communicator of group '" + group_name + "'";

  // Every member learns whether every member has a device, so all fail alike
  // instead of some waiting in the id broadcast below for a rank that left.
  std::string why;
  const int devices = cuda_device_count(&why);
  int first_without = devices > 0 ? size : rank;
  int agreed = size;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallreduce(&first_without, &agreed, 1, MPI_INT, MPI_MIN, bootstrap, &request);
  wait_with_deadline(&request, timeout_ms, where + " (device check)");
  if (agreed < size) {
    throw CommError(ErrorCode::failed_precondition,
                    agreed == rank
                        ? strformat("%s: the NCCL backend needs a CUDA device on every rank, and this "
                                    "rank (%d of group '%s') has none: %s",
                                    where.c_str(), rank, group_name.c_str(), why.c_str())
                        : strformat("%s: the NCCL backend needs a CUDA device on every rank, and rank %d "
                                    "of group '%s' has none",
                                    where.c_str(), agreed, group_name.c_str()));
  }
  const int device = local_rank % devices;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");

  struct {
    int ok;
    ncclUniqueId id;
  } hello{};
  if (rank == 0) hello.ok = ncclGetUniqueId(&hello.id) == ncclSuccess ? 1 : 0;
  MPI_Ibcast(&hello, static_cast<int>(sizeof hello), MPI_BYTE, 0, bootstrap, &request);
  wait_with_deadline(&request, timeout_ms, where + " (unique id broadcast)");
  if (!hello.ok) throw CommError(ErrorCode::internal, where + ": rank 0 could not create the NCCL unique id");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // no NCCL call may block the host: we poll instead
  auto handle = std::make_shared<NcclHandle>();
  handle->device = device;
  const auto deadline =
      SteadyClock::now() + std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 1800 * 1000);
  ncclResult_t result = ncclCommInitRankConfig(&handle->comm, size, hello.id, rank, &config);
  result = handle->comm ? settle(handle->comm, result, deadline) : result;
  if (result != ncclSuccess) {
    if (handle->comm) ncclCommAbort(handle->comm);
    handle->comm = nullptr;
    if (result == ncclInProgress) {
      throw CommError(ErrorCode::timeout,
                      strformat("%s: ncclCommInitRankConfig did not finish within %lld ms", where.c_str(),
                                static_cast<long long>(timeout_ms)));
    }
    throw CommError(ErrorCode::internal, where + ": ncclCommInitRankConfig: " + ncclGetErrorString(result));
  }
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check_cuda(cudaMalloc(&scratch, 16), "cudaMalloc");
  auto state = std::make_shared<CommState>("nccl", std::move(group_name), rank, size, std::move(world_ranks),
                                           std::move(options));
  return std::make_unique<NcclCommunicator>(std::move(handle), stream, scratch, std::move(state));
}

// ------------------------------------------------------------------ cuda --

namespace cuda {

void* alloc(int device, size_t bytes) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void free(void* device_pointer) { cudaFree(device_pointer); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

void synchronize(int device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace cuda
}  // namespace accel::comm
