/* accel/comm.h — process groups and collectives.
 *
 * Defines: AccelGroup, AccelWork, the device mesh (AccelMeshSpec) and its
 * standard groups, AccelCollectiveArgs and AccelCommServices.
 *
 * Groups are values handed to whoever uses them; there is no global "current
 * group". The standard groups come from one device mesh that parallel
 * plugins declare while planning (set_mesh); with rank r laid out as
 *     r = (pipeline_index * data_size + data_index) * tensor_size
 *         + tensor_index,
 *     data_index = replica_index * sharding_size + sharding_index,
 *     context_index = data_index % context_size,
 *     expert_index = data_index % expert_size,
 * tensor-parallel peers are adjacent ranks (same node first), context peers
 * next, then the rest of the sharding peers; replicas and pipeline stages
 * span nodes. data_size is sharding_size * replica_size.
 *
 * Context parallelism (since 1.10) splits each sequence over context_size
 * ranks: they hold the same model slice and see different tokens, so they
 * are data-parallel peers for the gradients (DATA, SHARDING and REPLICA
 * average over them as over any data rank: every rank's loss is the mean
 * over its own tokens, and every rank holds as many) while they read the
 * same micro-batches. The host hands every CONTEXT group one micro-batch:
 * the data loader's rank is data_index / context_size of
 * data_size / context_size.
 *
 * Expert parallelism (since 1.12) splits each mixture-of-experts layer's
 * experts over expert_size ranks: the innermost expert_size ranks of the
 * data index (EXPERT) each hold E / expert_size experts, exchange tokens
 * with all_to_all_v, and read different micro-batches (they are data ranks
 * for everything else). The ranks holding the same experts form
 * EXPERT_DATA (data_size / expert_size ranks): the experts' gradients are
 * summed there and divided by data_size, the average over the data group
 * that the other parameters' gradients get.
 *
 * A collective on CUDA tensors runs on NCCL, on CPU tensors on MPI; the
 * caller does not choose. Two modes:
 *  - synchronous (`work` == NULL): the operation is ordered on args->stream
 *    like a kernel; on a CPU tensor the call returns when it completed.
 *  - asynchronous (`work` != NULL): the host runs it on its COMM stream after
 *    the work already enqueued on args->stream, and returns a work handle; the
 *    caller waits (work_wait / work_synchronize) or polls (work_test) before
 *    it reads the output or reuses the input, then frees the handle.
 * Tensors must stay valid until the operation completed (synchronous: on the
 * stream; asynchronous: until the wait/test that observed completion).
 * Input and output tensors must be contiguous, on the same device. A tensor
 * that points into memory the host issued (a buffer from memory->allocate,
 * the model's storage) must lie inside it: one whose shape runs past the end
 * of that allocation is refused with ACCEL_ERROR_INVALID_ARGUMENT naming the
 * allocation, before anything moves. A plugin's own memory cannot be
 * checked and is accepted, unless ACCEL_COMM_VERIFY=memory (see below).
 *
 * Every rank of a group issues the same collectives on it in the same order.
 * The host checks it: at each step end the ranks of every group compare
 * what they issued (operation, dtype, count, reduce op, root; not labels),
 * and a rank waiting in a collective that a peer ended the step without
 * fails at once; with ACCEL_COMM_VERIFY=ops each collective is compared
 * before it is issued. A divergence returns ACCEL_ERROR_ABORTED (or ends the
 * job at step end) naming the step, the group and both operations
 * (docs/communication.md, "Collective checks"). Send/recv are not compared.
 * Nothing hangs forever: each operation has a deadline; on a timeout or a
 * failure elsewhere the call (or the wait) returns ACCEL_ERROR_TIMEOUT or
 * ACCEL_ERROR_ABORTED, the message names the rank and the operation, and the
 * plugin returns that status from its hook at once — the run is ending.
 *
 * Thread-safety: collectives, batches and group management are called from
 * the loop thread only (the thread that calls the plugin's hooks). Work
 * handles may be tested and waited from any thread, each by one at a time. */
#ifndef ACCEL_ABI_COMM_H_
#define ACCEL_ABI_COMM_H_

#include "accel/memory.h"
#include "accel/status.h"
#include "accel/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------- Handles --------------------------------- */

/* A process group: an ordered set of ranks with its own communicators.
 * Standard groups are host-owned and live until teardown; groups a plugin
 * created are destroyed by it. The handle is opaque, not an address: a
 * handle the host never issued, or one of a destroyed group, is refused with
 * ACCEL_ERROR_INVALID_ARGUMENT ("group handle 0x... is stale: its group was
 * destroyed"), never dereferenced. */
typedef struct AccelGroup AccelGroup;

/* An asynchronous operation in flight. Owned by the caller of the operation
 * that returned it; freed with work_free. Opaque like AccelGroup: a bogus
 * or freed handle is refused with ACCEL_ERROR_INVALID_ARGUMENT. */
typedef struct AccelWork AccelWork;

/* -------------------------------- Mesh ----------------------------------- */

/* The standard groups; each rank belongs to exactly one of each kind. */
typedef enum AccelGroupKind {
  ACCEL_GROUP_WORLD = 0,     /* every rank */
  ACCEL_GROUP_DATA = 1,      /* same model slice, different data */
  ACCEL_GROUP_TENSOR = 2,    /* tensor (and sequence) parallel peers */
  ACCEL_GROUP_PIPELINE = 3,  /* the stages of one pipeline, in stage order */
  ACCEL_GROUP_SHARDING = 4,  /* subset of DATA that shards state (FSDP/ZeRO) */
  ACCEL_GROUP_REPLICA = 5,   /* subset of DATA holding the same shard (HSDP) */
  ACCEL_GROUP_NODE = 6,      /* ranks on this node (local ranks) */
  ACCEL_GROUP_CONTEXT = 7,   /* since 1.10: the ranks one sequence is split
                                over (a subset of DATA; size 1 without
                                context parallelism) */
  ACCEL_GROUP_EXPERT = 8,    /* since 1.12: the ranks a layer's experts are
                                split over (a subset of DATA; size 1 without
                                expert parallelism) */
  ACCEL_GROUP_EXPERT_DATA = 9, /* since 1.12: the ranks holding the same
                                experts (DATA / EXPERT; all of DATA without
                                expert parallelism) */
  ACCEL_GROUP_KIND_FORCE_32BIT = 0x7fffffff
} AccelGroupKind;

/* Sizes of the mesh dimensions. 0 means "not mine to say". After every
 * plugin's plan hook the host resolves: tensor, pipeline and context
 * default to 1; of sharding and replica, one left 0 takes what remains of
 * the world, both left 0 give sharding = 1, replica = the rest. The product
 * tensor * pipeline * sharding * replica must equal the world size, and
 * context_size and expert_size must each divide the data size (sharding *
 * replica); expert_size defaults to 1. Two plugins
 * giving different non-zero values for one dimension is a configuration
 * error naming both. */
typedef struct AccelMeshSpec {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t tensor_size;
  int32_t pipeline_size;
  int32_t sharding_size;
  int32_t replica_size;
  int32_t context_size;    /* since 1.10: ranks one sequence is split over */
  int32_t reserved;        /* since 1.10: must be 0 (refused otherwise) */
  int32_t expert_size;     /* since 1.12: ranks a layer's experts are split
                              over (the model must have experts, a multiple
                              of it per layer) */
  int32_t reserved2;       /* since 1.12: must be 0 (refused otherwise) */
} AccelMeshSpec;

/* Declares (part of) the mesh. `mesh` is borrowed for the call.
 * When: only inside the plan_model hook. Thread: loop thread. */
typedef AccelStatus AccelCommSetMeshFn(AccelHost* host,
                                       const AccelMeshSpec* mesh);

/* Sets *group (out) to this rank's standard group of `kind`; host-owned,
 * valid until teardown. When: from the setup hook on (groups exist only once
 * the mesh is resolved); ACCEL_GROUP_WORLD and ACCEL_GROUP_NODE from the
 * create hook on. Thread: any. */
typedef AccelStatus AccelCommGetGroupFn(AccelHost* host, AccelGroupKind kind,
                                        AccelGroup** group);

/* What a group looks like from this rank. */
typedef struct AccelGroupInfo {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t rank;            /* out: this rank's index in the group */
  int32_t size;            /* out: number of ranks */
  const int32_t* ranks;    /* out: `size` global ranks in group order;
                              host-owned, valid as long as the group */
} AccelGroupInfo;

/* Fills *info (caller-owned; caller sets struct_size). Thread: any. */
typedef AccelStatus AccelCommGroupInfoFn(AccelHost* host,
                                         const AccelGroup* group,
                                         AccelGroupInfo* info);

/* Creates a group of the `num_ranks` global ranks listed in `ranks`
 * (borrowed). Collective over the world: every rank calls it with the same
 * list in the same order; a rank not in the list gets *group (out) = NULL.
 * When: from the setup hook on. Thread: loop thread. */
typedef AccelStatus AccelCommCreateGroupFn(AccelHost* host,
                                           const int32_t* ranks,
                                           int32_t num_ranks,
                                           AccelGroup** group);

/* Splits `parent` (MPI_Comm_split / ncclCommSplit): ranks with the same
 * `color` form one new group, ordered by `key`, then by parent rank. A
 * negative color gives *group (out) = NULL. Collective over parent.
 * When: from the setup hook on. Thread: loop thread. */
typedef AccelStatus AccelCommSplitGroupFn(AccelHost* host, AccelGroup* parent,
                                          int32_t color, int32_t key,
                                          AccelGroup** group);

/* Destroys a group from create_group/split_group (never a standard group).
 * Collective over its members; no work on it may be pending. */
typedef AccelStatus AccelCommDestroyGroupFn(AccelHost* host,
                                            AccelGroup* group);

/* ----------------------------- Collectives ------------------------------- */

typedef enum AccelReduceOp {
  ACCEL_REDUCE_SUM = 0,
  ACCEL_REDUCE_AVG = 1,   /* sum / group size, computed in the tensor dtype
                             (fp32 accumulation for 16-bit types) */
  ACCEL_REDUCE_MAX = 2,
  ACCEL_REDUCE_MIN = 3,
  ACCEL_REDUCE_OP_FORCE_32BIT = 0x7fffffff
} AccelReduceOp;

/* The arguments of every collective; each one documents which fields it
 * reads. Caller-owned; borrowed for the call (the tensors it points to for
 * longer: see the file comment). */
typedef struct AccelCollectiveArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelGroup* group;        /* NULL = world */
  const DLTensor* input;    /* what this rank contributes */
  const DLTensor* output;   /* where the result goes; may equal input for
                               all_reduce and broadcast (in place); for
                               all_gather (1.5) input may be this rank's
                               chunk of output, for reduce_scatter (1.7)
                               output may be this rank's chunk of input
                               (in place: its memory exactly, nothing else
                               overlapping) */
  AccelReduceOp op;         /* reductions only */
  int32_t peer;             /* broadcast: root; send/recv: the other rank;
                               both as an index in `group` */
  AccelStream stream;       /* ordering, see the file comment */
  int64_t timeout_ms;       /* 0 = the host's deadline,
                               --init_process_group.timeout (seconds) */
  const char* label;        /* for traces and the flight recorder ("fsdp
                               all_gather unit 3"); borrowed; may be NULL */
} AccelCollectiveArgs;

/* Each collective has this type. `work`: NULL for synchronous, else *work
 * (out) receives the handle. Thread: loop thread. Dtypes: reductions take
 * f32, f64, bf16, f16, i32, i64; the others also any 8-bit type incl. FP8.
 *
 * all_reduce:     output = op over ranks of input; same shape.
 * all_gather:     output = inputs concatenated in group-rank order; output
 *                 has group size times input's elements.
 * reduce_scatter: output = this rank's chunk of op over ranks of input;
 *                 input has group size times output's elements, chunk i
 *                 (in flat order) goes to group rank i. In place (1.7):
 *                 output is chunk `rank` of input itself (a sharded
 *                 optimizer reducing into its slice of a flat gradient
 *                 buffer, with no second buffer); input stays the
 *                 caller's and in use until the operation completed, and
 *                 its other chunks are unspecified afterwards. Any other
 *                 overlap is refused (ACCEL_ERROR_INVALID_ARGUMENT).
 *                 Before using it, a plugin checks the host's ABI minor
 *                 (AccelHostInfo.abi_version >= 1.7): older hosts may
 *                 compute a wrong result instead of refusing it.
 * broadcast:      output on every rank = output of rank `peer` (input unused).
 * all_to_all:     input and output split in group-size equal chunks; chunk j
 *                 of rank i's input lands in chunk i of rank j's output.
 * send:           sends input to `peer`.  recv: receives into output. */
typedef AccelStatus AccelCollectiveFn(AccelHost* host,
                                      const AccelCollectiveArgs* args,
                                      AccelWork** work);

/* since 1.11: all_to_all with a count per rank (a mixture of experts'
 * token exchange). Reads group, input, output, stream, timeout_ms and label
 * of `args`, and the two arrays, borrowed for the call, one entry per rank
 * of the group, each >= 0: this rank sends send_counts[j] elements to group
 * rank j and receives recv_counts[j] from it, each side's chunks packed in
 * group-rank order (the displacements are the counts' prefix sums). input
 * holds sum(send_counts) elements (its flat order), output
 * sum(recv_counts); the two do not overlap. Both sides must agree: rank
 * i's send count to j is j's receive count from i, and a chunk of another
 * length fails the operation on the receiver, its message naming the peer
 * and both counts. Counts that do not match the tensors, a NULL array or a
 * negative count are refused (ACCEL_ERROR_INVALID_ARGUMENT) before anything
 * is sent. Zero counts are allowed. In the collective
 * sequence check it counts as (all_to_all_v, dtype, group size). Same
 * sync/async modes and threads as the others. A 1.10 host has no such
 * member (ACCEL_HAS_FN). */
typedef AccelStatus AccelAllToAllVFn(AccelHost* host,
                                     const AccelCollectiveArgs* args,
                                     const int64_t* send_counts,
                                     const int64_t* recv_counts,
                                     AccelWork** work);

/* Waits for every rank of args->group to arrive (reads group, stream,
 * timeout_ms, label only). Same sync/async modes as the others. */
typedef AccelStatus AccelBarrierFn(AccelHost* host,
                                   const AccelCollectiveArgs* args,
                                   AccelWork** work);

/* Opens a batch on this thread: the send/recv calls up to batch_end are
 * issued together (ncclGroupStart/End), so a pipeline stage may send to its
 * successor and receive from it in either order without deadlock. Inside a
 * batch, operations pass work == NULL. Batches do not nest. */
typedef AccelStatus AccelCommBatchBeginFn(AccelHost* host);

/* Closes the batch. `work` NULL: synchronous (ordered on the stream of the
 * batched operations, which must all use one stream); else *work (out) is
 * one handle covering every operation of the batch. */
typedef AccelStatus AccelCommBatchEndFn(AccelHost* host, AccelWork** work);

/* ------------------------------ Work handles ----------------------------- */

/* Orders `stream` after the operation: work enqueued there afterwards sees
 * its result. Does not block the calling thread on a GPU; on CPU tensors it
 * blocks until the operation completed. */
typedef AccelStatus AccelWorkWaitFn(AccelHost* host, AccelWork* work,
                                    AccelStream stream);

/* Blocks the calling thread until the operation completed (or failed). */
typedef AccelStatus AccelWorkSynchronizeFn(AccelHost* host, AccelWork* work);

/* Sets *done (out) to whether the operation completed; never blocks. A failed
 * operation returns its error here. */
typedef AccelStatus AccelWorkTestFn(AccelHost* host, AccelWork* work,
                                    bool* done);

/* Frees the handle (NULL is a no-op). Only after work_wait or
 * work_synchronize returned, or work_test reported done; freeing a pending
 * handle is ACCEL_ERROR_FAILED_PRECONDITION and the handle stays valid. */
typedef AccelStatus AccelWorkFreeFn(AccelHost* host, AccelWork* work);

/* The communication area of the services table. */
typedef struct AccelCommServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelCommSetMeshFn* set_mesh;
  AccelCommGetGroupFn* get_group;
  AccelCommGroupInfoFn* group_info;
  AccelCommCreateGroupFn* create_group;
  AccelCommSplitGroupFn* split_group;
  AccelCommDestroyGroupFn* destroy_group;
  AccelCollectiveFn* all_reduce;
  AccelCollectiveFn* all_gather;
  AccelCollectiveFn* reduce_scatter;
  AccelCollectiveFn* broadcast;
  AccelCollectiveFn* all_to_all;
  AccelCollectiveFn* send;
  AccelCollectiveFn* recv;
  AccelBarrierFn* barrier;
  AccelCommBatchBeginFn* batch_begin;
  AccelCommBatchEndFn* batch_end;
  AccelWorkWaitFn* work_wait;
  AccelWorkSynchronizeFn* work_synchronize;
  AccelWorkTestFn* work_test;
  AccelWorkFreeFn* work_free;
  AccelAllToAllVFn* all_to_all_v;  /* since 1.11 */
} AccelCommServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_COMM_H_ */
