/* Simulates a plugin built against an older minor of ABI 1: its hook table
 * ends before the last hooks this host knows (struct_size stops after
 * `teardown`), and the memory past that end holds garbage. The host must read
 * the missing hooks as NULL and never call the garbage (accel/version.h). */
#include <accel/accel.h>

#include <stddef.h>

static int g_steps;

static AccelStatus on_step_end(AccelPlugin* self, const AccelStepArgs* args) {
  (void)self;
  (void)args;
  ++g_steps;
  return ACCEL_OK;
}

static AccelStatus on_teardown(AccelPlugin* self) {
  (void)self;
  return g_steps > 0 ? ACCEL_OK : ACCEL_ERROR_INTERNAL;
}

/* A full table in memory, so the poisoned field exists to be (wrongly) read. */
static AccelHooks kHooks = {
    .struct_size = ACCEL_FIELD_END(AccelHooks, teardown),
    .step_end = on_step_end,
    .teardown = on_teardown,
    .trace_event = (AccelHookTraceEventFn*)(void*)0x1, /* beyond struct_size: must be ignored */
};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {1, 0},
    .name = "older_minor",
    .version = "1.0.0",
    .description = "test plugin: a shorter hook table, as an older minor would have",
    .kind = ACCEL_PLUGIN_OBSERVER,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
