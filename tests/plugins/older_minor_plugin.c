/* A plugin built against ABI 1.0 on a newer-minor host: its descriptor says
 * 1.0 and its hook table is exactly 1.0's (struct_size ends at trace_event,
 * the smallest table the host accepts, accel/version.h). Hooks appended by
 * later minors read as NULL. A table shorter than 1.0's is refused
 * (broken_plugin.c, BROKEN_SHORT_HOOKS). */
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

static AccelHooks kHooks = {
    .struct_size = ACCEL_FIELD_END(AccelHooks, trace_event), /* ABI 1.0's table, frozen */
    .step_end = on_step_end,
    .teardown = on_teardown,
};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {1, 0},
    .name = "older_minor",
    .version = "1.0.0",
    .description = "test plugin: built against ABI 1.0, its hook table exactly 1.0's",
    .kind = ACCEL_PLUGIN_OBSERVER,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
