/* A test plugin written in C against the ABI headers alone: it implements
 * every non-take-over hook and appends one line per call to the file named by
 * its `log_file` option, so tests can check that the host calls each hook,
 * in the documented order, with sane arguments. Options of every type test
 * the option plumbing; `fail_in` makes one hook fail (a plugin whose setup
 * fails, say). Kind: precision, so it may join the linear chain later. */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct AccelPlugin {
  AccelHost* host;
  const AccelHostServices* services;
  FILE* log;
  const char* fail_in;
  int64_t every;
  int64_t steps_seen;
};

static AccelStatus record(AccelPlugin* self, const char* hook, const char* detail) {
  if (self->log) {
    fprintf(self->log, "%s%s%s\n", hook, detail ? " " : "", detail ? detail : "");
    fflush(self->log);
  }
  if (self->fail_in && strcmp(self->fail_in, hook) == 0) {
    self->services->set_error(self->host, ACCEL_ERROR_FAILED_PRECONDITION, "recorder was told to fail here");
    return ACCEL_ERROR_FAILED_PRECONDITION;
  }
  return ACCEL_OK;
}

static AccelStatus on_create(AccelCreateArgs* args) {
  AccelPlugin* self = (AccelPlugin*)calloc(1, sizeof(AccelPlugin));
  if (!self) return ACCEL_ERROR_OUT_OF_MEMORY;
  self->host = args->host;
  self->services = args->services;
  const AccelOptionServices* options = args->services->options;
  const char* path = NULL;
  if (options->get_string(args->host, "log_file", &path) == ACCEL_OK && path) self->log = fopen(path, "a");
  options->get_string(args->host, "fail_in", &self->fail_in);
  options->get_int(args->host, "every", &self->every);
  double lr = 0.0, scale = 0.0;
  bool verbose = false;
  int32_t mode = -1;
  char detail[160];
  if (options->get_double(args->host, "train.lr", &lr) != ACCEL_OK ||
      options->get_double(args->host, "scale", &scale) != ACCEL_OK ||
      options->get_bool(args->host, "verbose", &verbose) != ACCEL_OK ||
      options->get_enum(args->host, "mode", &mode) != ACCEL_OK) {
    free(self);
    return ACCEL_ERROR_INTERNAL;
  }
  snprintf(detail, sizeof detail, "lr=%g scale=%g verbose=%d mode=%d every=%lld", lr, scale, (int)verbose, (int)mode,
           (long long)self->every);
  args->self = self;
  return record(self, "create", detail);
}

static AccelStatus on_plan(AccelPlugin* self, const AccelPlanArgs* args) {
  char detail[64];
  snprintf(detail, sizeof detail, "units=%d", args->model ? (int)args->model->num_units : -1);
  return record(self, "plan_model", detail);
}

static AccelStatus on_setup(AccelPlugin* self, const AccelSetupArgs* args) {
  char detail[64];
  snprintf(detail, sizeof detail, "first_step=%lld micro=%d resuming=%d", (long long)args->first_step,
           (int)args->num_micro_batches, (args->flags & ACCEL_SETUP_RESUMING) ? 1 : 0);
  return record(self, "setup", detail);
}

static AccelStatus on_step_begin(AccelPlugin* self, const AccelStepArgs* args) {
  char detail[64];
  snprintf(detail, sizeof detail, "step=%lld", (long long)args->step);
  return record(self, "step_begin", detail);
}

static AccelStatus on_step_end(AccelPlugin* self, const AccelStepArgs* args) {
  char detail[96];
  const float loss = args->loss ? *(const float*)((const char*)args->loss->data + args->loss->byte_offset) : -1.0f;
  snprintf(detail, sizeof detail, "step=%lld loss=%.4f", (long long)args->step, loss);
  self->steps_seen++;
  if (self->services->trace && self->services->trace->metric) {
    self->services->trace->metric(self->host, "steps_seen", (double)self->steps_seen, ACCEL_METRIC_LAST);
  }
  return record(self, "step_end", detail);
}

static AccelStatus unit_hook(AccelPlugin* self, const char* name, AccelUnitHookArgs* args) {
  char detail[96];
  snprintf(detail, sizeof detail, "unit=%d micro=%d last=%d act=%s", (int)args->unit, (int)args->micro_batch,
           (args->flags & ACCEL_UNIT_HOOK_LAST_MICRO_BATCH) ? 1 : 0, args->activation ? "yes" : "null");
  return record(self, name, detail);
}
static AccelStatus on_fwd_pre(AccelPlugin* self, AccelUnitHookArgs* args) { return unit_hook(self, "unit_forward_pre", args); }
static AccelStatus on_fwd_post(AccelPlugin* self, AccelUnitHookArgs* args) { return unit_hook(self, "unit_forward_post", args); }
static AccelStatus on_bwd_pre(AccelPlugin* self, AccelUnitHookArgs* args) { return unit_hook(self, "unit_backward_pre", args); }
static AccelStatus on_bwd_post(AccelPlugin* self, AccelUnitHookArgs* args) { return unit_hook(self, "unit_backward_post", args); }

static AccelStatus on_gradients_ready(AccelPlugin* self, const AccelGradientsReadyArgs* args) {
  char detail[64];
  snprintf(detail, sizeof detail, "unit=%d numel=%lld", (int)args->unit,
           args->grads ? (long long)args->grads->shape[0] : -1LL);
  return record(self, "gradients_ready", detail);
}

static AccelStatus on_gradients_finalize(AccelPlugin* self, const AccelStepArgs* args) {
  (void)args;
  return record(self, "gradients_finalize", NULL);
}

/* A pass-through link of the linear chain: counts and forwards. */
static AccelStatus on_linear_forward(AccelPlugin* self, AccelLinearForwardArgs* args, const AccelLinearNext* next) {
  char detail[64];
  snprintf(detail, sizeof detail, "unit=%d param=%d rows=%lld", (int)args->unit, (int)args->param,
           (long long)args->input->shape[0]);
  AccelStatus status = record(self, "linear_forward", detail);
  if (status != ACCEL_OK) return status;
  *args->saved = self; /* this link's slot comes back in backward */
  return next->forward(next, args);
}

static AccelStatus on_linear_backward(AccelPlugin* self, AccelLinearBackwardArgs* args, const AccelLinearNext* next) {
  char detail[64];
  snprintf(detail, sizeof detail, "unit=%d param=%d slot=%s", (int)args->unit, (int)args->param,
           args->saved == self ? "ok" : "lost");
  AccelStatus status = record(self, "linear_backward", detail);
  if (status != ACCEL_OK) return status;
  return next->backward(next, args);
}

static AccelStatus on_save(AccelPlugin* self, const AccelStateArgs* args) {
  char detail[64];
  snprintf(detail, sizeof detail, "step=%lld", (long long)args->step);
  if (self->services->checkpoint && self->services->checkpoint->put_string) {
    char value[32];
    snprintf(value, sizeof value, "%lld", (long long)self->steps_seen);
    AccelStatus status = self->services->checkpoint->put_string(self->host, ACCEL_CHECKPOINT_PLUGIN, "steps_seen", value);
    if (status != ACCEL_OK) return status;
  }
  return record(self, "save_state", detail);
}

static AccelStatus on_load(AccelPlugin* self, const AccelStateArgs* args) {
  char detail[96];
  const char* value = NULL;
  if (self->services->checkpoint && self->services->checkpoint->get_string) {
    AccelStatus status = self->services->checkpoint->get_string(self->host, ACCEL_CHECKPOINT_PLUGIN, "steps_seen", &value);
    if (status != ACCEL_OK) return status;
  }
  snprintf(detail, sizeof detail, "step=%lld steps_seen=%s plugins=%s", (long long)args->step, value ? value : "?",
           args->saved_plugins ? args->saved_plugins : "?");
  return record(self, "load_state", detail);
}

static AccelStatus on_teardown(AccelPlugin* self) {
  AccelStatus status = record(self, "teardown", NULL);
  if (self->log) fclose(self->log);
  free(self);
  return status;
}

static const char* const kFailChoices[] = {"none", "create", "plan_model", "setup", "step_begin", "step_end",
                                           "unit_forward_pre", "unit_backward_post", "save_state", "load_state",
                                           "linear_forward", "linear_backward"};
static const char* const kModes[] = {"quiet", "loud"};

/* Per rank: each rank logs to its own file, and a test may make one rank fail. */
static const AccelOptionSpec kLogFile = {sizeof(AccelOptionSpec), NULL, "log_file", ACCEL_OPTION_STRING,
                                         ACCEL_OPTION_FLAG_PER_RANK, NULL,
                                         "append one line per hook call here", NULL, 0, NULL, NULL};
static const AccelOptionSpec kFailIn = {sizeof(AccelOptionSpec), NULL, "fail_in", ACCEL_OPTION_ENUM,
                                        ACCEL_OPTION_FLAG_PER_RANK, "none",
                                        "make this hook fail", kFailChoices, 12, NULL, NULL};
static const AccelOptionSpec kEvery = {sizeof(AccelOptionSpec), NULL, "every", ACCEL_OPTION_INT, 0, "1",
                                       "an integer option with bounds", NULL, 0, "1", "100"};
static const AccelOptionSpec kScale = {sizeof(AccelOptionSpec), NULL, "scale", ACCEL_OPTION_DOUBLE, 0, "0.5",
                                       "a double option", NULL, 0, NULL, NULL};
static const AccelOptionSpec kVerbose = {sizeof(AccelOptionSpec), NULL, "verbose", ACCEL_OPTION_BOOL, 0, "false",
                                         "a bool option", NULL, 0, NULL, NULL};
static const AccelOptionSpec kMode = {sizeof(AccelOptionSpec), NULL, "mode", ACCEL_OPTION_ENUM, 0, "quiet",
                                      "an enum option", kModes, 2, NULL, NULL};
static const AccelOptionSpec* const kOptions[] = {&kLogFile, &kFailIn, &kEvery, &kScale, &kVerbose, &kMode};

static const AccelHooks kHooks = {
    .struct_size = sizeof(AccelHooks),
    .create = on_create,
    .plan_model = on_plan,
    .setup = on_setup,
    .step_begin = on_step_begin,
    .step_end = on_step_end,
    .unit_forward_pre = on_fwd_pre,
    .unit_forward_post = on_fwd_post,
    .unit_backward_pre = on_bwd_pre,
    .unit_backward_post = on_bwd_post,
    .gradients_ready = on_gradients_ready,
    .gradients_finalize = on_gradients_finalize,
    .linear_forward = on_linear_forward,
    .linear_backward = on_linear_backward,
    .save_state = on_save,
    .load_state = on_load,
    .teardown = on_teardown,
};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = "recorder",
    .version = "1.0.0",
    .description = "test plugin: records every hook call",
    .kind = ACCEL_PLUGIN_PRECISION,
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
