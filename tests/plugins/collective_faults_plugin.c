/* Test plugin (C): makes one collective mistake on purpose, chosen by its
 * `fault` option, in the step_end hook of step `step`, so tests can check
 * that the host refuses it with one line naming the plugin and the call
 * instead of crashing, corrupting the heap or hanging:
 *   overrun_all_reduce  an all_reduce whose tensor claims 1024 floats of a
 *                       16-float buffer from memory->allocate
 *   overrun_all_gather  an all_gather whose output claims world x 16 floats
 *                       of a 16-float buffer (the shapes agree; the memory
 *                       does not)
 *   bogus_group         a collective on a group handle the host never issued
 *   stale_group         a collective on a group it split and destroyed
 *   bogus_work          work_wait on a work handle the host never issued
 *   stale_work          work_wait on a work handle already freed
 *   skip_all_reduce     every step every rank all-reduces 'collective_faults
 *                       A' then 'collective_faults B'; at step `step`, rank
 *                       `rank` (-1: the last) skips A
 *   all_to_all_v        no mistake: every step an all_to_all_v with uneven
 *                       and zero counts (rank i sends (i + 2j) % 3 floats of
 *                       value 100 i + j to rank j), each chunk checked
 *   all_to_all_v_disagree  that exchange, but at step `step` the last rank
 *                       expects one float more from rank 0 than rank 0 sends
 *   all_to_all_v_overrun   at step `step`, send counts summing past the input
 * With fault none it only issues A and B each step (the sequence check must
 * then stay quiet). */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum Fault {
  NONE,
  OVERRUN_ALL_REDUCE,
  OVERRUN_ALL_GATHER,
  BOGUS_GROUP,
  STALE_GROUP,
  BOGUS_WORK,
  STALE_WORK,
  SKIP,
  ALL_TO_ALL_V,
  ALL_TO_ALL_V_DISAGREE,
  ALL_TO_ALL_V_OVERRUN
};

struct AccelPlugin {
  AccelHost* host;
  const AccelHostServices* services;
  int32_t fault;
  int64_t step;
  int64_t rank;
  AccelBuffer* buffer; /* 16 floats */
  const DLTensor* small;
};

static AccelStatus on_create(AccelCreateArgs* args) {
  AccelPlugin* self = (AccelPlugin*)calloc(1, sizeof(AccelPlugin));
  if (!self) return ACCEL_ERROR_OUT_OF_MEMORY;
  self->host = args->host;
  self->services = args->services;
  const AccelOptionServices* options = args->services->options;
  if (options->get_enum(args->host, "fault", &self->fault) != ACCEL_OK ||
      options->get_int(args->host, "step", &self->step) != ACCEL_OK ||
      options->get_int(args->host, "rank", &self->rank) != ACCEL_OK) {
    free(self);
    return ACCEL_ERROR_INTERNAL;
  }
  args->self = self;
  return ACCEL_OK;
}

static AccelStatus on_setup(AccelPlugin* self, const AccelSetupArgs* args) {
  (void)args;
  static const int64_t shape[1] = {16};
  AccelAllocateArgs a = {.struct_size = sizeof(AccelAllocateArgs)};
  a.place = ACCEL_MEMORY_HOST;
  a.category = ACCEL_MEMORY_COMM;
  a.dtype.code = kDLFloat;
  a.dtype.bits = 32;
  a.dtype.lanes = 1;
  a.ndim = 1;
  a.shape = shape;
  a.flags = ACCEL_ALLOCATE_ZERO_FILL;
  a.label = "collective_faults small";
  AccelStatus status = self->services->memory->allocate(self->host, &a);
  if (status != ACCEL_OK) return status;
  self->buffer = a.buffer;
  self->small = a.tensor;
  return ACCEL_OK;
}

/* A 1-d f32 view of `data` claiming `count` elements. */
static DLTensor view(void* data, int64_t* shape, int64_t* strides, int64_t count) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  shape[0] = count;
  strides[0] = 1;
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = strides;
  return t;
}

static AccelStatus all_reduce(AccelPlugin* self, AccelGroup* group, const DLTensor* t, const char* label,
                              AccelWork** work) {
  AccelCollectiveArgs c = {.struct_size = sizeof(AccelCollectiveArgs)};
  c.group = group;
  c.input = t;
  c.output = t;
  c.op = ACCEL_REDUCE_SUM;
  c.label = label;
  return self->services->comm->all_reduce(self->host, &c, work);
}

/* The uneven exchange: the first 8 floats of the buffer are the input, the
 * last 8 the output (at most 2 floats to or from each of at most 4 ranks). */
static AccelStatus exchange(AccelPlugin* self, const AccelIdentity* id, int disagree, int overrun) {
  const int32_t n = id->world_size, r = id->rank;
  if (n > 4) return ACCEL_ERROR_INVALID_ARGUMENT;
  int64_t sends[4], receives[4], sent = 0, received = 0;
  float* data = (float*)self->small->data;
  for (int32_t j = 0; j < n; ++j) {
    sends[j] = (r + 2 * j) % 3;
    receives[j] = (j + 2 * r) % 3;
    for (int64_t k = 0; k < sends[j]; ++k) data[sent + k] = (float)(100 * r + j);
    sent += sends[j];
    received += receives[j];
  }
  if (disagree && r == n - 1) ++receives[0], ++received;
  int64_t in_shape[1], in_strides[1], out_shape[1], out_strides[1];
  DLTensor in = view(data, in_shape, in_strides, overrun ? sent + 20 : sent);
  DLTensor out = view(data + 8, out_shape, out_strides, received);
  AccelCollectiveArgs c = {.struct_size = sizeof(AccelCollectiveArgs)};
  c.input = &in;
  c.output = &out;
  c.label = "collective_faults all_to_all_v";
  AccelStatus status = self->services->comm->all_to_all_v(self->host, &c, sends, receives, NULL);
  if (status != ACCEL_OK) return status;
  int64_t at = 0;
  for (int32_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < receives[j]; ++k) {
      if (data[8 + at + k] != (float)(100 * j + r)) {
        fprintf(stderr, "collective_faults: rank %d got %g from rank %d, expected %d\n", r, data[8 + at + k], j,
                100 * j + r);
        return ACCEL_ERROR_INTERNAL;
      }
    }
    at += receives[j];
  }
  return ACCEL_OK;
}

static AccelStatus on_step_end(AccelPlugin* self, const AccelStepArgs* args) {
  const AccelCommServices* comm = self->services->comm;
  const AccelIdentity* id = NULL;
  AccelStatus status = self->services->get_identity(self->host, &id);
  if (status != ACCEL_OK) return status;
  const int now = args->step == self->step;
  int64_t shape[1], strides[1];
  if (self->fault == NONE || self->fault == SKIP) {
    const int64_t skipper = self->rank < 0 ? id->world_size - 1 : self->rank;
    const int skip = self->fault == SKIP && now && id->rank == skipper;
    if (!skip && (status = all_reduce(self, NULL, self->small, "collective_faults A", NULL)) != ACCEL_OK)
      return status;
    return all_reduce(self, NULL, self->small, "collective_faults B", NULL);
  }
  if (self->fault == ALL_TO_ALL_V || self->fault == ALL_TO_ALL_V_DISAGREE) {
    return exchange(self, id, self->fault == ALL_TO_ALL_V_DISAGREE && now, 0);
  }
  if (!now) return ACCEL_OK;
  switch (self->fault) {
    case ALL_TO_ALL_V_OVERRUN:
      return exchange(self, id, 0, 1);
    case OVERRUN_ALL_REDUCE: {
      DLTensor big = view(self->small->data, shape, strides, 1024);
      return all_reduce(self, NULL, &big, "collective_faults overrun", NULL);
    }
    case OVERRUN_ALL_GATHER: {
      DLTensor out = view(self->small->data, shape, strides, 16 * (int64_t)id->world_size);
      AccelCollectiveArgs c = {.struct_size = sizeof(AccelCollectiveArgs)};
      c.input = self->small;
      c.output = &out;
      c.label = "collective_faults gather";
      return comm->all_gather(self->host, &c, NULL);
    }
    case BOGUS_GROUP:
      return all_reduce(self, (AccelGroup*)(uintptr_t)0x1234, self->small, "collective_faults bogus group", NULL);
    case STALE_GROUP: {
      AccelGroup* group = NULL;
      if ((status = comm->split_group(self->host, NULL, 0, id->rank, &group)) != ACCEL_OK) return status;
      if ((status = comm->destroy_group(self->host, group)) != ACCEL_OK) return status;
      return all_reduce(self, group, self->small, "collective_faults stale group", NULL);
    }
    case BOGUS_WORK: {
      int not_a_work = 0;
      return comm->work_wait(self->host, (AccelWork*)&not_a_work, NULL);
    }
    case STALE_WORK: {
      AccelWork* work = NULL;
      if ((status = all_reduce(self, NULL, self->small, "collective_faults async", &work)) != ACCEL_OK) return status;
      if ((status = comm->work_wait(self->host, work, NULL)) != ACCEL_OK) return status;
      if ((status = comm->work_free(self->host, work)) != ACCEL_OK) return status;
      return comm->work_wait(self->host, work, NULL);
    }
    default:
      return ACCEL_OK;
  }
}

static AccelStatus on_teardown(AccelPlugin* self) {
  AccelStatus status = ACCEL_OK;
  if (self->buffer) status = self->services->memory->deallocate(self->host, self->buffer, NULL);
  free(self);
  return status;
}

static const char* const kFaults[] = {"none",         "overrun_all_reduce",    "overrun_all_gather",
                                      "bogus_group",  "stale_group",           "bogus_work",
                                      "stale_work",   "skip_all_reduce",       "all_to_all_v",
                                      "all_to_all_v_disagree", "all_to_all_v_overrun"};
static const AccelOptionSpec kFault = {sizeof(AccelOptionSpec), NULL, "fault", ACCEL_OPTION_ENUM, 0, "none",
                                       "the mistake to make", kFaults, 11, NULL, NULL};
static const AccelOptionSpec kStep = {sizeof(AccelOptionSpec), NULL, "step", ACCEL_OPTION_INT, 0, "1",
                                      "the step whose step_end makes it", NULL, 0, "0", NULL};
static const AccelOptionSpec kRank = {sizeof(AccelOptionSpec), NULL, "rank", ACCEL_OPTION_INT, 0, "-1",
                                      "skip_all_reduce: the rank that skips (-1: the last)", NULL, 0, "-1", NULL};
static const AccelOptionSpec* const kOptions[] = {&kFault, &kStep, &kRank};

static const AccelHooks kHooks = {.struct_size = sizeof(AccelHooks),
                                  .create = on_create,
                                  .setup = on_setup,
                                  .step_end = on_step_end,
                                  .teardown = on_teardown};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = "collective_faults",
    .version = "1.0.0",
    .description = "test plugin: one deliberate collective mistake (overrun, bad handle, skipped all_reduce)",
    .kind = ACCEL_PLUGIN_OBSERVER,
    .capabilities = ACCEL_CAP_CPU,
    .options = kOptions,
    .num_options = sizeof(kOptions) / sizeof(kOptions[0]),
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
