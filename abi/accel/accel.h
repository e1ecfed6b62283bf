/* accel/accel.h — the whole plugin ABI v1 in one include.
 *
 * A plugin includes this (or the one-purpose headers it needs), implements
 * accel_plugin_init_v1 (accel/plugin.h) and builds with -fvisibility=hidden.
 * Plain C11; also valid C++ (every header has extern "C" guards). Needs
 * <dlpack/dlpack.h> (0.6 or newer) on the include path. See docs/abi.md for
 * the contract in prose and abi/CHANGELOG.md for what each minor added.
 *
 *   accel/version.h     versions, struct_size rules, extension chain
 *   accel/status.h      status codes, the error-message rule
 *   accel/tensor.h      DLPack views, FP8 dtype codes, helpers
 *   accel/options.h     option schema and typed lookup
 *   accel/memory.h      accounted memory, copies, streams, events
 *   accel/comm.h        mesh, process groups, collectives, work handles
 *   accel/kernels.h     cast/FP8, axpy, norms, fused optimizers, GEMM
 *   accel/model.h       units, parameters, plan, storage, run
 *   accel/trace.h       trace events, metrics
 *   accel/checkpoint.h  tensor slices by global offset
 *   accel/precision.h   the precision policy (1.8)
 *   accel/services.h    identity, logging, the services table
 *   accel/plugin.h      entry symbol, descriptor, hooks */
#ifndef ACCEL_ABI_ACCEL_H_
#define ACCEL_ABI_ACCEL_H_

#include "accel/version.h"
#include "accel/status.h"
#include "accel/tensor.h"
#include "accel/options.h"
#include "accel/memory.h"
#include "accel/comm.h"
#include "accel/kernels.h"
#include "accel/model.h"
#include "accel/trace.h"
#include "accel/checkpoint.h"
#include "accel/gather_codec.h"
#include "accel/precision.h"
#include "accel/services.h"
#include "accel/plugin.h"

#endif /* ACCEL_ABI_ACCEL_H_ */
