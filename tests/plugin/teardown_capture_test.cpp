// A plugin's trace capture ends before its teardown: the registry turns it
// off (waiting for deliveries in progress, host/runtime/trace_capture.h)
// before calling teardown, so an event emitted afterwards never reaches the
// plugin's trace_event with its state freed. The trace_test plugin
// (tests/plugins/trace_plugin.c) turns capture on in setup, never off, and
// frees itself in teardown: without the registry's step, the range emitted
// after teardown_all below would be delivered into freed memory.
#include <gtest/gtest.h>

#include <filesystem>

#include "host/plugin/hook_dispatch.h"
#include "host/plugin/plugin_registry.h"
#include "host/runtime/host_context.h"
#include "host/runtime/trace_scope.h"

namespace {

TEST(PluginTeardown, CaptureEndsBeforeTeardownSoNoEventReachesAFreedPlugin) {
  accel::runtime::HostContext context;
  accel::plugin::PluginRegistry registry(context);
  registry.load({"trace_test"}, {std::filesystem::path(ACCEL_TEST_PLUGIN_ROOT) / "good"});
  accel::plugin::HookDispatcher hooks(registry, context);
  hooks.create_all();
  hooks.setup(0, 1, false);
  ASSERT_TRUE(context.trace_capture.captures("trace_test"));
  { const accel::runtime::TraceRange step(&context, "step"); }  // delivered: its teardown wants events

  registry.teardown_all();
  EXPECT_FALSE(context.trace_capture.captures("trace_test"));
  EXPECT_FALSE(context.trace_capture.any());
  const accel::runtime::TraceRange after(&context, "after_teardown");
  EXPECT_FALSE(after.recording());  // nobody captures: nothing delivered
}

}  // namespace
