/* Deliberately broken plugins, one per BROKEN_* definition (see
 * CMakeLists.txt), each exercising one refusal of the loader. Every variant
 * except BROKEN_NO_ENTRY and BROKEN_ABI_MAJOR_2 exports a valid entry symbol
 * whose descriptor is wrong in exactly one way. */
#include <accel/accel.h>

#include <stddef.h>

#ifndef PLUGIN_NAME
#define PLUGIN_NAME "broken"
#endif

#if defined(BROKEN_SETUP_FAILS)
static AccelStatus on_setup_fails(AccelPlugin* self, const AccelSetupArgs* args) {
  (void)self;
  (void)args;
  return ACCEL_ERROR_FAILED_PRECONDITION;  /* no set_error: the host still names the plugin and hook */
}
#endif

#if defined(BROKEN_OBSERVER_CODEC) || defined(BROKEN_HALF_CODEC) || defined(SECOND_CODEC)
/* A gather codec (ABI 1.8) that encodes nothing: valid as such, refused
 * from an observer (BROKEN_OBSERVER_CODEC), with only its query
 * (BROKEN_HALF_CODEC), or beside another provider (SECOND_CODEC, a
 * precision plugin that loads fine alone). */
static AccelStatus on_codec_query(AccelPlugin* self, AccelGatherCodecQueryArgs* args) {
  (void)self;
  (void)args;
  return ACCEL_OK;
}
#endif
#if defined(BROKEN_OBSERVER_CODEC) || defined(SECOND_CODEC)
static AccelStatus on_codec_call(AccelPlugin* self, const AccelGatherCodecArgs* args) {
  (void)self;
  (void)args;
  return ACCEL_ERROR_FAILED_PRECONDITION;
}
#endif

static AccelStatus on_step_end_noop(AccelPlugin* self, const AccelStepArgs* args) {
  (void)self;
  (void)args;
  return ACCEL_OK;
}

#if defined(BROKEN_BAD_OPTION)
static const char* const kNoChoices[] = {NULL};
static const AccelOptionSpec kBad = {sizeof(AccelOptionSpec), NULL, "strategy", ACCEL_OPTION_ENUM, 0, "full",
                                     "an enum whose default is not allowed", kNoChoices + 1, 0, NULL, NULL};
static const AccelOptionSpec* const kOptions[] = {&kBad};
#define OPTIONS kOptions
#define NUM_OPTIONS 1
#else
#define OPTIONS NULL
#define NUM_OPTIONS 0
#endif

#if defined(BROKEN_CONFLICT)
static const char* const kConflicts[] = {"recorder"};
#define CONFLICTS kConflicts
#define NUM_CONFLICTS 1
#else
#define CONFLICTS NULL
#define NUM_CONFLICTS 0
#endif

static AccelHooks kHooks = {
#if defined(BROKEN_SHORT_HOOKS)
    .struct_size = ACCEL_FIELD_END(AccelHooks, teardown), /* ABI 1.0's ends at trace_event */
#else
    .struct_size = sizeof(AccelHooks),
#endif
#if defined(BROKEN_SETUP_FAILS)
    .setup = on_setup_fails,
#endif
    .step_end = on_step_end_noop,
#if defined(BROKEN_OBSERVER_CODEC) || defined(BROKEN_HALF_CODEC) || defined(SECOND_CODEC)
    .gather_codec_query = on_codec_query,
#endif
#if defined(BROKEN_OBSERVER_CODEC) || defined(SECOND_CODEC)
    .gather_encode = on_codec_call,
    .gather_decode = on_codec_call,
#endif
};

static const AccelPluginDescriptor kDescriptor = {
#if defined(BROKEN_STRUCT_SIZE)
    .struct_size = 16, /* far smaller than ABI 1.0's descriptor */
#else
    .struct_size = sizeof(AccelPluginDescriptor),
#endif
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = PLUGIN_NAME,
    .version = "0.0.1",
    .description = "deliberately broken test plugin",
#if defined(BROKEN_REDUCES_NOTHING)
    /* Claims the data-parallel reduction, implements no hook to do it in. */
    .kind = ACCEL_PLUGIN_PARALLEL,
    .capabilities = ACCEL_CAP_CPU | ACCEL_CAP_REDUCES_GRADS,
#elif defined(BROKEN_HALF_CODEC) || defined(SECOND_CODEC)
    .kind = ACCEL_PLUGIN_PRECISION,
    .capabilities = ACCEL_CAP_CPU,
#else
    .kind = ACCEL_PLUGIN_OBSERVER,
#endif
    .conflicts = CONFLICTS,
    .num_conflicts = NUM_CONFLICTS,
    .options = OPTIONS,
    .num_options = NUM_OPTIONS,
    .hooks = &kHooks,
};

#if defined(BROKEN_NO_ENTRY)
/* Exports something, but not the entry symbol. */
ACCEL_PLUGIN_EXPORT int accel_plugin_something_else(void) { return kDescriptor.struct_size != 0; }
#elif defined(BROKEN_ABI_MAJOR_2)
ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v2(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
#else
ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
#endif
