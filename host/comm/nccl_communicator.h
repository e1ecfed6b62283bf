// The NCCL backend: CUDA-memory collectives. No CUDA or NCCL type appears
// here, so this header (and every file including it) compiles without the
// toolkit; nccl_communicator.cpp alone includes <nccl.h> (the toolkit's
// header) and links the torch wheel's libnccl.so.2 and libcudart.so.13 —
// one NCCL and one CUDA runtime per process (docs/dependencies.md).
//
// Bootstrap (the llm.c pattern): rank 0 of the group creates the unique id,
// MPI_Bcast carries it to the others over the group's MPI communicator, and
// every rank joins with ncclCommInitRankConfig on a *non-blocking*
// communicator (config.blocking = 0): no NCCL call may block the host, so
// init and every enqueue are polled (ncclCommGetAsyncError) against the
// deadline, and the watchdog can ncclCommAbort a communicator whose peer
// died, which frees kernels that would otherwise spin forever.
//
// Operations run on the communicator's own stream, after the work already
// enqueued on OpOptions::cuda_stream (an event orders them); the Work holds
// an event recorded after the operation. Work::wait blocks the host until
// that event passed (polled, never cudaEventSynchronize); wait_stream orders
// another stream after it without blocking. send/recv tags are ignored:
// NCCL keeps per-peer order instead.
//
// Thread-safety: as Communicator; the watchdog aborts from its own thread,
// which NCCL allows.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "host/comm/communicator.h"

namespace accel::comm {

// CUDA devices visible to this process. 0 when there are none, with *why
// (if given) saying why: no driver, no device, or the CUDA error text.
int cuda_device_count(std::string* why = nullptr);

// Creates the NCCL communicator of the group whose MPI communicator is
// `bootstrap`; collective over it (every member calls it). The device is
// `local_rank % device count` (one GPU per rank of a node). Throws CommError:
// failed_precondition when a member has no CUDA device (every member throws,
// naming the first such rank), timeout when init does not finish within
// options.timeout_ms, internal for NCCL/CUDA errors.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm bootstrap, int local_rank,
                                                     std::string group_name, CommOptions options,
                                                     std::vector<int> world_ranks = {});

// The NCCL version of the library loaded at run time (e.g. 22809), or 0.
int nccl_runtime_version();
// The version of the nccl.h this backend was compiled against.
int nccl_header_version();

// Device memory for tests and benchmarks (throws CommError on CUDA errors).
namespace cuda {
void* alloc(int device, size_t bytes);
void free(void* device_pointer);
void copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
void synchronize(int device);
}  // namespace cuda

}  // namespace accel::comm
