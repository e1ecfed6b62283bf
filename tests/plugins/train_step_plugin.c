/* Test plugin (C): takes over the whole train step, the seam a pipeline
 * schedule uses, as one stage: each micro-batch runs forward over every unit
 * with model->run_forward, then backward with model->run_backward (ABI 1.7).
 * The host's own loop must not run (its unit hooks fire only inside these
 * calls), and the loss the host reports is the one these forwards reached:
 * the same as the host's loop. It counts its calls and reports them as a
 * metric. With train_step_owner.misuse set it breaks the protocol instead
 * (forward without backward), which the host must refuse in one line. */
#include <accel/accel.h>

#include <stdlib.h>
#include <string.h>

struct AccelPlugin {
  AccelHost* host;
  const AccelHostServices* services;
  long calls;
  int32_t num_units;
  bool misuse;
};

static AccelStatus on_create(AccelCreateArgs* args) {
  AccelPlugin* self = (AccelPlugin*)calloc(1, sizeof(AccelPlugin));
  if (!self) return ACCEL_ERROR_OUT_OF_MEMORY;
  self->host = args->host;
  self->services = args->services;
  const AccelModelInfo* info = NULL;
  AccelStatus status = self->services->model->get_info(self->host, &info);
  if (status != ACCEL_OK) {
    free(self);
    return status;
  }
  self->num_units = info->num_units;
  bool misuse = false;
  if (self->services->options->get_bool(self->host, "misuse", &misuse) == ACCEL_OK) self->misuse = misuse;
  args->self = self;
  return ACCEL_OK;
}

static AccelStatus on_train_step(AccelPlugin* self, const AccelTrainStepArgs* args) {
  if (args->num_micro_batches < 1) return ACCEL_ERROR_INVALID_ARGUMENT;
  const AccelModelServices* model = self->services->model;
  if (!ACCEL_HAS_FN(model, AccelModelServices, run_forward) || model->run_forward == NULL) {
    return ACCEL_ERROR_UNSUPPORTED;
  }
  for (int32_t micro = 0; micro < args->num_micro_batches; ++micro) {
    AccelRunForwardArgs forward;
    memset(&forward, 0, sizeof(forward));
    forward.struct_size = sizeof(forward);
    forward.first_unit = 0;
    forward.end_unit = self->num_units;
    forward.micro_batch = micro;
    AccelStatus status = model->run_forward(self->host, &forward);
    if (status != ACCEL_OK) return status;
    if (forward.loss == NULL) return ACCEL_ERROR_INTERNAL;
    if (self->misuse) continue;  /* the host refuses a step left like this */
    AccelRunBackwardArgs backward;
    memset(&backward, 0, sizeof(backward));
    backward.struct_size = sizeof(backward);
    backward.first_unit = 0;
    backward.end_unit = self->num_units;
    backward.micro_batch = micro;
    status = model->run_backward(self->host, &backward);
    if (status != ACCEL_OK) return status;
  }
  ++self->calls;
  self->services->trace->metric(self->host, "calls", (double)self->calls, ACCEL_METRIC_LAST);
  return ACCEL_OK;
}

static AccelStatus on_teardown(AccelPlugin* self) {
  free(self);
  return ACCEL_OK;
}

static const AccelOptionSpec kMisuse = {
    .struct_size = sizeof(AccelOptionSpec),
    .name = "misuse",
    .type = ACCEL_OPTION_BOOL,
    .default_value = "false",
    .help = "leave every forward without its backward",
};
static const AccelOptionSpec* const kOptions[] = {&kMisuse};

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
    .version = "1.1.0",
    .description = "test plugin: takes over the train step, running every unit with run_forward/run_backward",
    .kind = ACCEL_PLUGIN_PARALLEL,
    .capabilities = ACCEL_CAP_CPU,
    .options = kOptions,
    .num_options = 1,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
