// One accel-host run from its arguments: load the plugins, parse the full
// command line, then help / version / list, or train (see run.h).
#include "host/app/run.h"

#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "host/cli/options.h"
#include "host/comm/process_group.h"
#include "host/model/tensor_memory.h"
#include "host/plugin/discovery.h"
#include "host/plugin/hook_dispatch.h"
#include "host/plugin/plugin_error.h"
#include "host/plugin/plugin_list.h"
#include "host/plugin/plugin_options.h"
#include "host/plugin/plugin_registry.h"
#include "host/runtime/host_context.h"
#include "host/train/trainer.h"
#include "host/util/log.h"
#include "host/util/memory_stats.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

using accel::cli::UsageError;

void fill_identity(AccelIdentity& identity, const accel::comm::MpiSession& mpi) {
  identity.struct_size = sizeof(identity);
  identity.rank = mpi.rank();
  identity.world_size = mpi.world_size();
  identity.local_rank = mpi.local_rank();
  identity.local_world_size = mpi.local_world_size();
  identity.node_rank = mpi.rank() / mpi.local_world_size();
  identity.num_nodes = (mpi.world_size() + mpi.local_world_size() - 1) / mpi.local_world_size();
  identity.device = DLDevice{kDLCPU, 0};
}

bool reduces_gradients(const accel::plugin::PluginRegistry& registry) {
  for (const auto& p : registry.plugins()) {
    if (p->descriptor().capabilities & ACCEL_CAP_REDUCES_GRADS) return true;
  }
  return false;
}

bool has_parallel_plugin(const accel::plugin::PluginRegistry& registry) {
  for (const auto& p : registry.plugins()) {
    if (p->descriptor().kind == ACCEL_PLUGIN_PARALLEL) return true;
  }
  return false;
}

// Every rank loads the same plugins; if any rank fails, all stop (no rank is
// left waiting in a collective for one that exited). With several ranks and
// no parallel strategy named, `ddp` is loaded too: the default data parallel.
void load_plugins_everywhere(accel::plugin::PluginRegistry& registry, accel::cli::PluginRequest request,
                             const std::vector<std::filesystem::path>& dirs, const accel::comm::MpiSession& mpi) {
  std::string error;
  try {
    registry.load(request.plugins, dirs);
    if (mpi.world_size() > 1 && !has_parallel_plugin(registry)) {
      request.plugins.push_back("ddp");
      registry.load(request.plugins, dirs);
    }
    if (mpi.world_size() > 1 && !reduces_gradients(registry)) {
      error = accel::strformat(
          "%d ranks launched, but none of the loaded plugins reduces gradients across ranks (add --plugin ddp)",
          mpi.world_size());
    }
  } catch (const accel::plugin::PluginError& e) {
    error = e.what();
  }
  if (!mpi.all_succeeded(error.empty())) {
    throw UsageError(error.empty() ? "plugin loading failed on another rank" : error);
  }
}

}  // namespace

int run_accel(const std::vector<std::string>& args, const comm::MpiSession& mpi) {
  accel::log::init(mpi.rank(), accel::log::Level::info);
  const accel::cli::PluginRequest request = accel::cli::scan_plugin_request(args);
  const auto dirs = accel::plugin::plugin_search_dirs(request.plugin_paths, std::getenv("ACCEL_PLUGIN_PATH"),
                                                      accel::plugin::current_executable_dir());
  // Declared first, destroyed last: plugins' teardown may still use groups.
  std::unique_ptr<accel::comm::ProcessGroup> world;
  accel::runtime::HostContext context;
  fill_identity(context.identity, mpi);
  accel::plugin::PluginRegistry registry(context);
  load_plugins_everywhere(registry, request, dirs, mpi);

  const auto plugin_options = accel::plugin::describe_plugin_options(registry);
  const accel::cli::ParsedCommandLine parsed =
      accel::cli::parse_command_line(args, registry.empty() ? nullptr : &plugin_options);
  switch (parsed.action) {
    case accel::cli::Action::help:
      if (mpi.rank() == 0) std::fputs(parsed.help_text.c_str(), stdout);
      return 0;
    case accel::cli::Action::version:
      if (mpi.rank() == 0) std::printf("accel-host %s (plugin ABI %d.%d)\n", ACCEL_VERSION, ACCEL_ABI_VERSION_MAJOR,
                                       ACCEL_ABI_VERSION_MINOR);
      return 0;
    case accel::cli::Action::list_plugins:
      if (mpi.rank() == 0) accel::plugin::print_plugin_list(dirs, context, stdout);
      return 0;
    case accel::cli::Action::run:
      break;
  }

  accel::RunConfig config = parsed.config;
  accel::log::init(mpi.rank(), accel::log::parse_level(config.log_level));
  accel::plugin::fill_option_store(registry, parsed.plugin_values, config, context.options);
  accel::cli::validate_for_world(config, mpi.world_size());
  accel::comm::CommOptions comm_options;
  comm_options.timeout_ms = static_cast<int64_t>(config.comm.timeout_s * 1000.0);
  comm_options.backend = config.comm.backend == "mpi"    ? accel::comm::Backend::mpi
                         : config.comm.backend == "nccl" ? accel::comm::Backend::nccl
                                                         : accel::comm::Backend::auto_select;
  world = accel::comm::ProcessGroup::create_world(mpi, comm_options);
  context.world = world.get();
  if (config.threads > 0) at::set_num_threads(config.threads);
  // Before the model's first tensor: the memory ledger counts every tensor
  // byte where it is allocated (host/model/tensor_memory.h).
  accel::record_startup_memory();
  accel::model::install_counting_cpu_allocator();
  for (const auto& p : registry.plugins()) {
    accel::log::info(accel::strformat("plugin %s %s (%s) from %s", p->name().c_str(), p->descriptor().version,
                                      accel::plugin::kind_name(p->descriptor().kind), p->path().c_str()));
  }
  accel::plugin::HookDispatcher hooks(registry, context);
  accel::train::Trainer trainer(config, mpi.rank(), mpi.world_size(), &hooks, &context);
  trainer.run();
  return 0;
}


}  // namespace accel::app
