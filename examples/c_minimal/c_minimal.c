/* c_minimal — the smallest useful Accel plugin, in C11 alone: the ABI
 * headers (accel/accel.h) and nothing else, no SDK, no C++.
 *
 * An observer that counts training steps in step_end, optionally logs a line
 * every `log_every` steps, and reports the count at teardown. It shows the
 * whole contract a C plugin fulfils by hand: one exported entry symbol, a
 * static descriptor, hook table and option schema (plugin-owned, immutable,
 * alive until unload), an instance made in create and freed in teardown, and
 * errors reported with set_error before a non-OK status is returned.
 *
 * Threads: every hook here runs on the host's loop thread. */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>

/* The instance: the plugin's own type behind the opaque AccelPlugin*. */
typedef struct StepCounter {
  AccelHost* host;
  const AccelHostServices* services;
  int64_t log_every;  /* 0: only at teardown */
  int64_t steps;
} StepCounter;

static AccelStatus counter_create(AccelCreateArgs* args) {
  StepCounter* counter;
  int64_t log_every = 0;
  const AccelOptionServices* options = args->services->options;
  AccelStatus status;
  if (!ACCEL_HAS_FN(options, AccelOptionServices, get_int)) {
    args->services->set_error(args->host, ACCEL_ERROR_UNSUPPORTED,
                              "this host offers no option lookup");
    return ACCEL_ERROR_UNSUPPORTED;
  }
  status = options->get_int(args->host, "log_every", &log_every);
  if (status != ACCEL_OK) return status; /* the host's message is pending */

  counter = (StepCounter*)calloc(1, sizeof(*counter));
  if (counter == NULL) {
    args->services->set_error(args->host, ACCEL_ERROR_OUT_OF_MEMORY,
                              "cannot allocate the step counter");
    return ACCEL_ERROR_OUT_OF_MEMORY;
  }
  counter->host = args->host;
  counter->services = args->services;
  counter->log_every = log_every;
  args->self = (AccelPlugin*)counter;
  return ACCEL_OK;
}

static AccelStatus counter_step_end(AccelPlugin* self,
                                    const AccelStepArgs* args) {
  StepCounter* counter = (StepCounter*)self;
  char line[128];
  if ((args->flags & ACCEL_STEP_EVAL) != 0) return ACCEL_OK;
  ++counter->steps;
  if (counter->log_every > 0 && counter->steps % counter->log_every == 0) {
    snprintf(line, sizeof(line), "%lld steps so far",
             (long long)counter->steps);
    counter->services->log(counter->host, ACCEL_LOG_INFO, line);
  }
  return ACCEL_OK;
}

static AccelStatus counter_teardown(AccelPlugin* self) {
  StepCounter* counter = (StepCounter*)self;
  char line[128];
  if (counter == NULL) return ACCEL_OK;
  snprintf(line, sizeof(line), "counted %lld training steps",
           (long long)counter->steps);
  counter->services->log(counter->host, ACCEL_LOG_INFO, line);
  free(counter);
  return ACCEL_OK;
}

/* ------------------------- Static plugin data ---------------------------- */

static const AccelHooks kHooks = {
    .struct_size = sizeof(AccelHooks),
    .create = counter_create,
    .step_end = counter_step_end,
    .teardown = counter_teardown,
    /* every other hook NULL: "not mine" */
};

static const AccelOptionSpec kLogEvery = {
    .struct_size = sizeof(AccelOptionSpec),
    .name = "log_every",
    .type = ACCEL_OPTION_INT,
    .default_value = "0",
    .help = "log the step count every N steps (0: only at teardown)",
    .min_value = "0",
};

static const AccelOptionSpec* const kOptions[] = {&kLogEvery};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = "c_minimal",
    .version = "1.0.0",
    .description = "counts training steps (C example)",
    .kind = ACCEL_PLUGIN_OBSERVER,
    .capabilities = ACCEL_CAP_CPU | ACCEL_CAP_CUDA,
    .options = kOptions,
    .num_options = sizeof(kOptions) / sizeof(kOptions[0]),
    .hooks = &kHooks,
};

/* The one exported symbol. Nothing to check: the descriptor is static. */
ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(
    const AccelHostInfo* info, const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
