/* The cheapest possible plugin for the dispatch benchmark: its step_begin
 * and unit_forward_pre hooks only count calls. */
#include <accel/accel.h>

static long g_calls;

static AccelStatus on_step_begin(AccelPlugin* self, const AccelStepArgs* args) {
  (void)self;
  (void)args;
  ++g_calls;
  return ACCEL_OK;
}

static AccelStatus on_unit(AccelPlugin* self, AccelUnitHookArgs* args) {
  (void)self;
  (void)args;
  ++g_calls;
  return ACCEL_OK;
}

static const AccelHooks kHooks = {
    .struct_size = sizeof(AccelHooks), .step_begin = on_step_begin, .unit_forward_pre = on_unit};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = "noop",
    .version = "1.0.0",
    .description = "benchmark plugin: hooks that only count",
    .kind = ACCEL_PLUGIN_OBSERVER,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
