/* Test plugin (C): an observer that turns trace capture on in setup and
 * counts the events the host delivers to its trace_event hook (called from
 * any thread, so the count is atomic); it reports the count as a metric at
 * every step_end and checks at teardown that events arrived. */
#include <accel/accel.h>

#include <stdatomic.h>
#include <stdlib.h>

struct AccelPlugin {
  AccelHost* host;
  const AccelHostServices* services;
  atomic_long events;
};

static AccelStatus on_create(AccelCreateArgs* args) {
  AccelPlugin* self = (AccelPlugin*)calloc(1, sizeof(AccelPlugin));
  if (!self) return ACCEL_ERROR_OUT_OF_MEMORY;
  self->host = args->host;
  self->services = args->services;
  atomic_init(&self->events, 0);
  args->self = self;
  return ACCEL_OK;
}

static AccelStatus on_setup(AccelPlugin* self, const AccelSetupArgs* args) {
  (void)args;
  return self->services->trace->set_capture(self->host, true);
}

static AccelStatus on_step_end(AccelPlugin* self, const AccelStepArgs* args) {
  (void)args;
  /* The metric itself is delivered as a COUNTER event too. */
  self->services->trace->instant(self->host, "trace_test.step_end", "test");
  self->services->trace->metric(self->host, "events", (double)atomic_load(&self->events), ACCEL_METRIC_LAST);
  return ACCEL_OK;
}

static void on_trace_event(AccelPlugin* self, const AccelTraceEvent* event) {
  (void)event;
  atomic_fetch_add(&self->events, 1);
}

static AccelStatus on_teardown(AccelPlugin* self) {
  const long events = atomic_load(&self->events);
  if (events == 0) self->services->set_error(self->host, ACCEL_ERROR_INTERNAL, "no trace event was delivered");
  free(self);
  return events > 0 ? ACCEL_OK : ACCEL_ERROR_INTERNAL;
}

static const AccelHooks kHooks = {
    .struct_size = sizeof(AccelHooks),
    .create = on_create,
    .setup = on_setup,
    .step_end = on_step_end,
    .teardown = on_teardown,
    .trace_event = on_trace_event,
};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = "trace_test",
    .version = "1.0.0",
    .description = "test plugin: captures trace events",
    .kind = ACCEL_PLUGIN_OBSERVER,
    .capabilities = ACCEL_CAP_CPU,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
