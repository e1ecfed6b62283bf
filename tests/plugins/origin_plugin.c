/* A plugin that needs a library beside it, found through RUNPATH $ORIGIN, as
 * vendors ship them (issue 30: loaded through /proc/self/fd/N, $ORIGIN meant
 * /proc/self/fd and the helper was not found). Each step_end adds to the
 * helper's count; teardown fails unless the helper counted every step, and
 * the description quotes the helper's first answer. */
#include <accel/accel.h>

#include <stdio.h>

int accel_test_origin_count(int add); /* libvendor_origin_helper.so */

static int g_steps;

static AccelStatus on_step_end(AccelPlugin* self, const AccelStepArgs* args) {
  (void)self;
  (void)args;
  ++g_steps;
  accel_test_origin_count(1);
  return ACCEL_OK;
}

static AccelStatus on_teardown(AccelPlugin* self) {
  (void)self;
  return g_steps > 0 && accel_test_origin_count(0) == g_steps + 41 ? ACCEL_OK : ACCEL_ERROR_INTERNAL;
}

static AccelHooks kHooks = {
    .struct_size = sizeof(AccelHooks),
    .step_end = on_step_end,
    .teardown = on_teardown,
};

static char g_description[96];

static AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = PLUGIN_NAME,
    .version = "1.0.0",
    .description = g_description,
    .kind = ACCEL_PLUGIN_OBSERVER,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  static int answer;
  if (answer == 0) answer = accel_test_origin_count(41);
  snprintf(g_description, sizeof(g_description), "test plugin: its bundled helper answered %d", answer);
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
