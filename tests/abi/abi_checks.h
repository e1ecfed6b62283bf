/* tests/abi/abi_checks.h — layout and behaviour checks of the plugin ABI,
 * shared by the C11 (abi_c11_test.c) and C++17 (abi_cxx17_test.cc) tests.
 *
 * Pins, for every struct: struct_size at offset 0 and the extension chain at
 * offset 8; no tail padding (so struct_size = sizeof(T) is exact and an
 * appended field always grows it); and the end of its 1.0 prefix, which no
 * later minor may move. When a minor appends a field to T, update T's
 * CURRENT_LAST (the check fails until you do) and leave the 1.0 columns
 * alone. Layouts are pinned for LP64, the only v1 platform.
 *
 * Include after defining ACCEL_TEST_STATIC_ASSERT(cond, msg). */
#ifndef ACCEL_TESTS_ABI_CHECKS_H_
#define ACCEL_TESTS_ABI_CHECKS_H_

#include <stdio.h>

#include "accel/accel.h"

ACCEL_TEST_STATIC_ASSERT(sizeof(void*) == 8 && sizeof(size_t) == 8,
                         "ABI v1 is LP64 only");
ACCEL_TEST_STATIC_ASSERT(ACCEL_ABI_VERSION_MAJOR == 1, "major");
ACCEL_TEST_STATIC_ASSERT(ACCEL_ABI_VERSION_MINOR >= 0, "minor");

/* ------------------------------ Struct layouts --------------------------- */

/* T: growable struct; LAST: its current last field; LAST_1_0 / END_1_0: the
 * last field of its 1.0 layout and where that field ends. */
#define ACCEL_CHECK_STRUCT(T, LAST, LAST_1_0, END_1_0)                       \
  ACCEL_TEST_STATIC_ASSERT(offsetof(T, struct_size) == 0,                    \
                           #T ": struct_size first");                        \
  ACCEL_TEST_STATIC_ASSERT(sizeof(((T*)0)->struct_size) == sizeof(size_t),   \
                           #T ": struct_size is size_t");                    \
  ACCEL_TEST_STATIC_ASSERT(sizeof(T) == ACCEL_FIELD_END(T, LAST),            \
                           #T ": tail padding, or LAST is stale");           \
  ACCEL_TEST_STATIC_ASSERT(ACCEL_FIELD_END(T, LAST_1_0) == (END_1_0),        \
                           #T ": the 1.0 prefix moved")

/* Growable structs that also carry the extension chain at offset 8. */
#define ACCEL_CHECK_EXT_STRUCT(T, LAST, LAST_1_0, END_1_0)                   \
  ACCEL_CHECK_STRUCT(T, LAST, LAST_1_0, END_1_0);                            \
  ACCEL_TEST_STATIC_ASSERT(offsetof(T, extensions) == sizeof(size_t),        \
                           #T ": extensions second")

/* version.h */
ACCEL_TEST_STATIC_ASSERT(sizeof(AccelAbiVersion) == 8, "AccelAbiVersion");
ACCEL_CHECK_STRUCT(AccelExtensionBase, next, next, 32);
/* options.h */
ACCEL_CHECK_EXT_STRUCT(AccelOptionSpec, max_value, max_value, 80);
ACCEL_CHECK_EXT_STRUCT(AccelOptionServices, is_set, is_set, 64);
/* memory.h */
ACCEL_CHECK_EXT_STRUCT(AccelAllocateArgs, tensor, tensor, 80);
ACCEL_CHECK_EXT_STRUCT(AccelCopyArgs, reserved, stream, 40);
ACCEL_CHECK_EXT_STRUCT(AccelMemoryStats, num_allocs, num_allocs, 40);
ACCEL_CHECK_EXT_STRUCT(AccelMemoryServices, event_elapsed, event_elapsed,
                       144);
/* comm.h */
ACCEL_CHECK_EXT_STRUCT(AccelMeshSpec, reserved2, replica_size, 32);
ACCEL_CHECK_EXT_STRUCT(AccelGroupInfo, ranks, ranks, 32);
ACCEL_CHECK_EXT_STRUCT(AccelCollectiveArgs, label, label, 72);
ACCEL_CHECK_EXT_STRUCT(AccelCommServices, all_to_all_v, work_free, 176);
/* kernels.h */
ACCEL_CHECK_EXT_STRUCT(AccelCastArgs, output_transposed, stream, 64);
ACCEL_CHECK_EXT_STRUCT(AccelAxpyArgs, stream, stream, 56);
ACCEL_CHECK_EXT_STRUCT(AccelScaleArgs, stream, stream, 48);
ACCEL_CHECK_EXT_STRUCT(AccelFillArgs, stream, stream, 40);
ACCEL_CHECK_EXT_STRUCT(AccelSquaredNormArgs, stream, stream, 48);
ACCEL_CHECK_EXT_STRUCT(AccelClipScaleArgs, stream, stream, 72);
ACCEL_CHECK_EXT_STRUCT(AccelAdamWArgs, stream, stream, 128);
ACCEL_CHECK_EXT_STRUCT(AccelSgdArgs, stream, stream, 120);
ACCEL_CHECK_EXT_STRUCT(AccelGemmArgs, stream, stream, 104);
ACCEL_CHECK_EXT_STRUCT(AccelFp8ScaleUpdateArgs, stream, stream, 64);
ACCEL_CHECK_EXT_STRUCT(AccelKernelServices, adamw_step_scaled,
                       fp8_scale_update, 96);
ACCEL_CHECK_EXT_STRUCT(AccelScaledAdamWArgs, stream, param, 24);
/* model.h */
ACCEL_CHECK_EXT_STRUCT(AccelModelInfo, micro_batch_size, micro_batch_size,
                       104);
ACCEL_CHECK_EXT_STRUCT(AccelUnitInfo, param_dtype, param_dtype, 56);
ACCEL_CHECK_EXT_STRUCT(AccelParamInfo, split_parts, tied_index, 104);
ACCEL_CHECK_EXT_STRUCT(AccelMaterializeArgs, grads, grads, 64);
ACCEL_CHECK_EXT_STRUCT(AccelRunForwardArgs, loss, loss, 64);
ACCEL_CHECK_EXT_STRUCT(AccelRunBackwardArgs, grad_input, grad_input, 56);
ACCEL_CHECK_EXT_STRUCT(AccelModelServices, plan_context_parallel, run_backward, 128);
/* since 1.10: its first layout is pinned as 1.0 columns are */
ACCEL_CHECK_EXT_STRUCT(AccelContextParallelSpec, a2a_size, a2a_size, 24);
/* trace.h */
ACCEL_CHECK_EXT_STRUCT(AccelTraceEvent, detail, detail, 112);
ACCEL_CHECK_EXT_STRUCT(AccelTraceServices, set_detail, set_capture, 72);
/* checkpoint.h */
ACCEL_CHECK_EXT_STRUCT(AccelCheckpointSliceArgs, reserved, stream, 64);
ACCEL_CHECK_EXT_STRUCT(AccelCheckpointTensorInfo, global_shape, global_shape,
                       32);
ACCEL_CHECK_EXT_STRUCT(AccelCheckpointServices, get_string, get_string, 56);
/* services.h */
ACCEL_CHECK_EXT_STRUCT(AccelIdentity, device, device, 48);
/* gather_codec.h (introduced in 1.8: the "1.0" columns are its first layout) */
ACCEL_CHECK_EXT_STRUCT(AccelGatherCodecQueryArgs, code_dtypes, code_dtypes, 40);
ACCEL_CHECK_EXT_STRUCT(AccelGatherCodecArgs, stream, stream, 80);
ACCEL_CHECK_EXT_STRUCT(AccelGatherCodecServices, decode, decode, 40);
ACCEL_CHECK_EXT_STRUCT(AccelHostServices, precision, checkpoint, 112);
/* precision.h (1.8) */
ACCEL_CHECK_EXT_STRUCT(AccelPrecisionPolicy, reserved, reserved, 32);
ACCEL_CHECK_EXT_STRUCT(AccelPrecisionServices, get_policy, get_policy, 32);
/* plugin.h */
ACCEL_CHECK_EXT_STRUCT(AccelPluginDescriptor, hooks, hooks, 104);
ACCEL_CHECK_EXT_STRUCT(AccelHostInfo, reserved, reserved, 72);
ACCEL_CHECK_EXT_STRUCT(AccelCreateArgs, hooks, hooks, 48);
ACCEL_CHECK_EXT_STRUCT(AccelPlanArgs, model, model, 24);
ACCEL_CHECK_EXT_STRUCT(AccelSetupArgs, flags, flags, 32);
ACCEL_CHECK_EXT_STRUCT(AccelStepArgs, grad_norm, grad_norm, 64);
ACCEL_CHECK_EXT_STRUCT(AccelTrainStepArgs, stream, stream, 40);
ACCEL_CHECK_EXT_STRUCT(AccelUnitHookArgs, replacement_buffer,
                       replacement_buffer, 64);
ACCEL_CHECK_EXT_STRUCT(AccelGradientsReadyArgs, grads, grads, 40);
ACCEL_CHECK_EXT_STRUCT(AccelClipArgs, total_norm, total_norm, 48);
ACCEL_CHECK_EXT_STRUCT(AccelOptimizerStepArgs, stream, stream, 120);
ACCEL_CHECK_EXT_STRUCT(AccelLinearForwardArgs, output_buffer, output_buffer,
                       88);
ACCEL_CHECK_EXT_STRUCT(AccelLinearBackwardArgs, grad_input_buffer,
                       grad_input_buffer, 104);
ACCEL_CHECK_EXT_STRUCT(AccelLinearNext, host_data, host_data, 40);
ACCEL_CHECK_EXT_STRUCT(AccelStateArgs, stream, stream, 48);
ACCEL_CHECK_EXT_STRUCT(AccelHooks, gather_decode, trace_event, 176);

/* DLPack structs the ABI embeds keep their 0.6 / 1.x layout. */
ACCEL_TEST_STATIC_ASSERT(sizeof(DLDataType) == 4, "DLDataType");
ACCEL_TEST_STATIC_ASSERT(sizeof(DLDevice) == 8, "DLDevice");
ACCEL_TEST_STATIC_ASSERT(sizeof(DLTensor) == 48, "DLTensor");
ACCEL_TEST_STATIC_ASSERT(offsetof(DLTensor, strides) == 32, "DLTensor");

/* -------------------------------- Enums ---------------------------------- */

/* Every enum is 32 bits and its values are frozen. */
#define ACCEL_CHECK_ENUM(T) \
  ACCEL_TEST_STATIC_ASSERT(sizeof(T) == 4, #T " is 32 bits")
ACCEL_CHECK_ENUM(AccelStatus);
ACCEL_CHECK_ENUM(AccelOptionType);
ACCEL_CHECK_ENUM(AccelStreamRole);
ACCEL_CHECK_ENUM(AccelMemoryCategory);
ACCEL_CHECK_ENUM(AccelMemoryPlace);
ACCEL_CHECK_ENUM(AccelGroupKind);
ACCEL_CHECK_ENUM(AccelContextCommType);
ACCEL_CHECK_ENUM(AccelReduceOp);
ACCEL_CHECK_ENUM(AccelAmaxAlgo);
ACCEL_CHECK_ENUM(AccelScaledAdamWPass);
ACCEL_CHECK_ENUM(AccelUnitKind);
ACCEL_CHECK_ENUM(AccelParamRole);
ACCEL_CHECK_ENUM(AccelParallelHint);
ACCEL_CHECK_ENUM(AccelStorageInit);
ACCEL_CHECK_ENUM(AccelTraceEventType);
ACCEL_CHECK_ENUM(AccelMetricReduce);
ACCEL_CHECK_ENUM(AccelCheckpointSpace);
ACCEL_CHECK_ENUM(AccelLogLevel);
ACCEL_CHECK_ENUM(AccelPluginKind);
ACCEL_CHECK_ENUM(AccelOptimizerKind);

ACCEL_TEST_STATIC_ASSERT(ACCEL_OK == 0 && ACCEL_ERROR_UNSUPPORTED == 5 &&
                             ACCEL_ERROR_TIMEOUT == 8 &&
                             ACCEL_ERROR_VERSION_MISMATCH == 13,
                         "AccelStatus values");
ACCEL_TEST_STATIC_ASSERT(ACCEL_GROUP_WORLD == 0 && ACCEL_GROUP_TENSOR == 2 &&
                             ACCEL_GROUP_NODE == 6 &&
                             ACCEL_GROUP_CONTEXT == 7,
                         "AccelGroupKind values");
ACCEL_TEST_STATIC_ASSERT(ACCEL_CONTEXT_P2P == 0 && ACCEL_CONTEXT_A2A == 1 &&
                             ACCEL_CONTEXT_A2A_P2P == 2,
                         "AccelContextCommType values");
ACCEL_TEST_STATIC_ASSERT(ACCEL_PLUGIN_PARALLEL == 1 &&
                             ACCEL_PLUGIN_PRECISION == 2 &&
                             ACCEL_PLUGIN_OBSERVER == 3,
                         "AccelPluginKind values");
ACCEL_TEST_STATIC_ASSERT(ACCEL_PARALLEL_REPLICATED == 0 &&
                             ACCEL_PARALLEL_COLUMN == 1 &&
                             ACCEL_PARALLEL_ROW == 2 &&
                             ACCEL_PARALLEL_VOCAB == 3,
                         "AccelParallelHint values");

/* ------------------------------- Dtype codes ----------------------------- */

ACCEL_TEST_STATIC_ASSERT(ACCEL_DL_FLOAT8_E4M3FN == 10 &&
                             ACCEL_DL_FLOAT8_E5M2 == 12 && ACCEL_DL_BOOL == 6,
                         "DLPack 1.1 codes");
#if defined(DLPACK_MAJOR_VERSION) && \
    (DLPACK_MAJOR_VERSION > 1 ||    \
     (DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION >= 1))
/* A dlpack.h that has the codes itself must agree with ours. */
ACCEL_TEST_STATIC_ASSERT(kDLFloat8_e4m3fn == ACCEL_DL_FLOAT8_E4M3FN &&
                             kDLFloat8_e5m2 == ACCEL_DL_FLOAT8_E5M2 &&
                             kDLBool == ACCEL_DL_BOOL,
                         "ACCEL_DL_* disagree with dlpack.h");
#endif

/* ------------------------------ Runtime checks --------------------------- */

#define ACCEL_EXPECT(cond)                                          \
  do {                                                              \
    if (!(cond)) {                                                  \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__,   \
              #cond);                                               \
      ++failures;                                                   \
    }                                                               \
  } while (0)

/* A minimal plugin: proves the entry declaration, the typedef and a static
 * descriptor fit together in this language. */
static const AccelOptionSpec* const* test_no_options = NULL;

static AccelStatus test_create(AccelCreateArgs* args) {
  args->self = NULL;
  return ACCEL_OK;
}

static const AccelHooks test_hooks = {
    sizeof(AccelHooks), NULL, test_create, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, /* 1.8: gather codec */ NULL, NULL, NULL};

static const char* const test_conflicts[] = {"other"};

static const AccelPluginDescriptor test_descriptor = {
    sizeof(AccelPluginDescriptor),
    NULL,
    {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    "abi_test",
    "1.0.0",
    "compile-time ABI test plugin",
    ACCEL_PLUGIN_OBSERVER,
    0,
    ACCEL_CAP_CPU,
    test_conflicts,
    1,
    NULL,
    0,
    &test_hooks};

AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                 const AccelPluginDescriptor** descriptor) {
  if (info == NULL || info->abi_version.major != 1) {
    return ACCEL_ERROR_VERSION_MISMATCH;
  }
  *descriptor = &test_descriptor;
  return ACCEL_OK;
}

static int accel_abi_runtime_checks(void) {
  int failures = 0;

  /* The entry symbol through its typedef. */
  AccelPluginInitV1Fn* entry = accel_plugin_init_v1;
  AccelHostInfo info;
  const AccelPluginDescriptor* descriptor = NULL;
  info.struct_size = sizeof(info);
  info.extensions = NULL;
  info.abi_version.major = ACCEL_ABI_VERSION_MAJOR;
  info.abi_version.minor = ACCEL_ABI_VERSION_MINOR;
  info.host_name = "test";
  info.host_version = "0";
  info.host = NULL;
  info.services = NULL;
  info.plugin_path = "";
  info.flags = ACCEL_HOST_INFO_ONLY;
  info.reserved = 0;
  ACCEL_EXPECT(entry(&info, &descriptor) == ACCEL_OK);
  ACCEL_EXPECT(descriptor == &test_descriptor);
  ACCEL_EXPECT(test_no_options == NULL);

  /* A table from an "older minor": everything after create is missing. */
  {
    AccelHooks older = test_hooks;
    older.struct_size = ACCEL_FIELD_END(AccelHooks, create);
    ACCEL_EXPECT(ACCEL_HAS_FN(&older, AccelHooks, create));
    ACCEL_EXPECT(!ACCEL_STRUCT_HAS_FIELD(&older, AccelHooks, plan_model));
    ACCEL_EXPECT(!ACCEL_HAS_FN(&older, AccelHooks, trace_event));
    ACCEL_EXPECT(ACCEL_HAS_FN(descriptor->hooks, AccelHooks, create));
    ACCEL_EXPECT(!ACCEL_HAS_FN(descriptor->hooks, AccelHooks, setup));
    ACCEL_EXPECT(!ACCEL_HAS_FN((const AccelHooks*)NULL, AccelHooks, create));
  }

  /* Extension chain lookup. */
  {
    AccelExtensionBase second = {sizeof(AccelExtensionBase), "com.example.b",
                                 1, 0, NULL};
    AccelExtensionBase first = {sizeof(AccelExtensionBase), "com.example.a",
                                1, 0, &second};
    ACCEL_EXPECT(accel_find_extension(&first, "com.example.b") == &second);
    ACCEL_EXPECT(accel_find_extension(&first, "com.example.a") == &first);
    ACCEL_EXPECT(accel_find_extension(&first, "com.example") == NULL);
    ACCEL_EXPECT(accel_find_extension(NULL, "x") == NULL);
  }

  /* Status names. */
  ACCEL_EXPECT(accel_status_name(ACCEL_OK)[8] == '\0');
  ACCEL_EXPECT(accel_status_name((AccelStatus)999)[12] == 'U');

  /* Dtypes and tensors. */
  {
    DLDataType e4m3 = accel_dtype(ACCEL_DL_FLOAT8_E4M3FN, 8);
    DLDataType e5m2 = accel_dtype(ACCEL_DL_FLOAT8_E5M2, 8);
    DLDataType f32 = accel_dtype(kDLFloat, 32);
    DLDataType unset = {0, 0, 0};
    int64_t shape[2] = {3, 4};
    int64_t strides[2] = {4, 1};
    int64_t transposed[2] = {1, 3};
    float data[12];
    DLTensor t;
    ACCEL_EXPECT(accel_dtype_is_fp8(e4m3) && accel_dtype_is_fp8(e5m2));
    ACCEL_EXPECT(!accel_dtype_is_fp8(f32));
    ACCEL_EXPECT(accel_fp8_max(e4m3) == 448.0);
    ACCEL_EXPECT(accel_fp8_max(e5m2) == 57344.0);
    ACCEL_EXPECT(accel_dtype_is_unset(unset) && !accel_dtype_is_unset(f32));
    ACCEL_EXPECT(accel_dtype_equal(f32, accel_dtype(kDLFloat, 32)));
    t.data = data;
    t.device.device_type = kDLCPU;
    t.device.device_id = 0;
    t.ndim = 2;
    t.dtype = f32;
    t.shape = shape;
    t.strides = strides;
    t.byte_offset = 4;
    ACCEL_EXPECT(accel_tensor_numel(&t) == 12);
    ACCEL_EXPECT(accel_tensor_nbytes(&t) == 48);
    ACCEL_EXPECT(accel_tensor_is_contiguous(&t));
    ACCEL_EXPECT(accel_tensor_begin(&t) == (void*)&data[1]);
    t.strides = transposed;
    ACCEL_EXPECT(!accel_tensor_is_contiguous(&t));
  }

  return failures;
}

#endif /* ACCEL_TESTS_ABI_CHECKS_H_ */
