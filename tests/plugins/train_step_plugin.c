/* Test plugin (C): takes over the whole train step, the seam a pipeline
 * schedule uses. It runs no unit itself (model->run_forward/run_backward come
 * with the pipeline strategy), so the host must skip its own micro-batch
 * loop: no unit hook may fire, and the loss is not a number. It counts its
 * calls and reports them as a metric. */
#include <accel/accel.h>

#include <stdlib.h>

struct AccelPlugin {
  AccelHost* host;
  const AccelHostServices* services;
  long calls;
};

static AccelStatus on_create(AccelCreateArgs* args) {
  AccelPlugin* self = (AccelPlugin*)calloc(1, sizeof(AccelPlugin));
  if (!self) return ACCEL_ERROR_OUT_OF_MEMORY;
  self->host = args->host;
  self->services = args->services;
  args->self = self;
  return ACCEL_OK;
}

static AccelStatus on_train_step(AccelPlugin* self, const AccelTrainStepArgs* args) {
  if (args->num_micro_batches < 1) return ACCEL_ERROR_INVALID_ARGUMENT;
  ++self->calls;
  self->services->trace->metric(self->host, "calls", (double)self->calls, ACCEL_METRIC_LAST);
  return ACCEL_OK;
}

static AccelStatus on_teardown(AccelPlugin* self) {
  free(self);
  return ACCEL_OK;
}

static const AccelHooks kHooks = {
    .struct_size = sizeof(AccelHooks),
    .create = on_create,
    .train_step = on_train_step,
    .teardown = on_teardown,
};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = "train_step_owner",
    .version = "1.0.0",
    .description = "test plugin: takes over the train step",
    .kind = ACCEL_PLUGIN_PARALLEL,
    .capabilities = ACCEL_CAP_CPU,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
