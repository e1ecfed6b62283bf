// How much a hook costs through the ABI, and how long plugins take to
// discover, load and validate (issue 3's "hook dispatch costs next to
// nothing"). Google Benchmark; results and the command in docs/benchmarks.md.
//
//   direct_call      a non-inlined C++ call doing the same work as the hook
//   function_pointer_call  the same through a function pointer (the floor)
//   abi_hook         HookDispatcher::step_begin with one plugin: the real
//                    path (normalised hook table, pending-error reset, status check)
//   abi_unit_hook    the same for unit_forward_pre (args built per call)
//   load_all         discover + dlopen + validate every plugin in a directory
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include "host/plugin/discovery.h"
#include "host/plugin/hook_dispatch.h"
#include "host/plugin/plugin_registry.h"
#include "host/runtime/host_context.h"

namespace {

namespace fs = std::filesystem;

fs::path bench_plugin_dir() { return fs::path(ACCEL_BENCH_PLUGIN_DIR); }

__attribute__((noinline)) int direct_step_begin(void* self, const AccelStepArgs* args) {
  benchmark::DoNotOptimize(self);
  benchmark::DoNotOptimize(args);
  return 0;
}

void direct_call(benchmark::State& state) {
  AccelStepArgs args{};
  int dummy = 0;
  for (auto _ : state) benchmark::DoNotOptimize(direct_step_begin(&dummy, &args));
}
BENCHMARK(direct_call);

// The floor of any plugin call: an indirect call the compiler cannot see through.
void function_pointer_call(benchmark::State& state) {
  AccelStepArgs args{};
  int dummy = 0;
  int (*volatile fn)(void*, const AccelStepArgs*) = &direct_step_begin;
  for (auto _ : state) benchmark::DoNotOptimize(fn(&dummy, &args));
}
BENCHMARK(function_pointer_call);

struct LoadedNoop {
  accel::runtime::HostContext context;
  accel::plugin::PluginRegistry registry{context};
  std::unique_ptr<accel::plugin::HookDispatcher> hooks;
  LoadedNoop() {
    registry.load({"noop"}, {bench_plugin_dir()});
    hooks = std::make_unique<accel::plugin::HookDispatcher>(registry, context);
    hooks->create_all();
  }
};

void abi_hook(benchmark::State& state) {
  LoadedNoop loaded;
  AccelStepArgs args{};
  args.struct_size = sizeof(args);
  for (auto _ : state) loaded.hooks->step_begin(args);
}
BENCHMARK(abi_hook);

void abi_unit_hook(benchmark::State& state) {
  LoadedNoop loaded;
  for (auto _ : state) {
    AccelUnitHookArgs args{};
    args.struct_size = sizeof(args);
    args.unit = 1;
    loaded.hooks->unit_forward_pre(args);
  }
}
BENCHMARK(abi_unit_hook);

void load_all(benchmark::State& state) {
  const std::vector<fs::path> dirs = {fs::path(ACCEL_TEST_PLUGIN_DIR) / "good"};
  std::vector<std::string> names;
  for (const fs::path& file : accel::plugin::find_plugin_files(dirs)) {
    const std::string stem = file.stem().string();  // libaccel_<name>
    names.push_back(stem.substr(std::string("libaccel_").size()));
  }
  for (auto _ : state) {
    accel::runtime::HostContext context;
    accel::plugin::PluginRegistry registry(context);
    registry.load(names, dirs);
    benchmark::DoNotOptimize(registry.plugins().size());
  }
  state.counters["plugins"] = static_cast<double>(names.size());
}
BENCHMARK(load_all)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
