// The plugin conformance checker (see check_plugin.h).
#include "host/app/check_plugin.h"

#include <boost/dll/library_info.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "host/app/check_data_parallel.h"
#include "host/app/run.h"
#include "host/cli/options.h"
#include "host/plugin/discovery.h"
#include "host/plugin/loaded_plugin.h"
#include "host/plugin/plugin_error.h"
#include "host/plugin/trusted_file.h"
#include "host/runtime/host_context.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

namespace fs = std::filesystem;

class Report {
 public:
  explicit Report(bool print) : print_(print) {}

  // Runs one check; `body` returns the detail for PASS or throws for FAIL.
  bool check(const char* name, const std::function<std::string()>& body) {
    try {
      line("PASS", name, body());
      ++passed_;
      return true;
    } catch (const std::exception& e) {
      line("FAIL", name, e.what());
      ++failed_;
      return false;
    }
  }
  void skip(const char* name, const std::string& why) {
    line("SKIP", name, why);
    ++skipped_;
  }
  int finish() const {
    if (print_) std::printf("%d passed, %d failed, %d skipped\n", passed_, failed_, skipped_);
    return failed_ == 0 ? 0 : 1;
  }

 private:
  void line(const char* verdict, const char* name, const std::string& detail) const {
    if (print_) std::printf("  %-4s  %-13s %s\n", verdict, name, detail.c_str());
    std::fflush(stdout);
  }
  bool print_;
  int passed_ = 0, failed_ = 0, skipped_ = 0;
};

std::string make_temp_dir() {
  std::string pattern = (fs::temp_directory_path() / "accel-check-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("cannot create a temporary directory");
  return pattern;
}

}  // namespace

int check_plugin(const std::vector<std::string>& args, const comm::MpiSession& mpi) {
  if (args.empty() || args.front().rfind("--", 0) == 0) {
    throw cli::UsageError("usage: accel-host check-plugin PATH [run options...]");
  }
  const fs::path file = fs::absolute(args.front()).lexically_normal();
  const std::vector<std::string> extra(args.begin() + 1, args.end());
  log::init(mpi.rank(), log::Level::warn);
  Report report(mpi.rank() == 0);
  if (mpi.rank() == 0) std::printf("check-plugin %s (%d rank%s)\n", file.c_str(), mpi.world_size(),
                                   mpi.world_size() == 1 ? "" : "s");

  if (!report.check("file", [&] {
        if (!fs::is_regular_file(file)) throw std::runtime_error("no such file");
        const plugin::TrustedFile trusted = plugin::TrustedFile::open(file);
        return "opened once as " + trusted.resolved().string() +
               "; neither it nor a directory above it is writable by other users";
      })) {
    return report.finish();
  }
  report.check("exports", [&] {
    const plugin::TrustedFile trusted = plugin::TrustedFile::open(file);
    boost::dll::library_info info(trusted.proc_path());
    std::string others;
    bool has_entry = false;
    for (const std::string& symbol : info.symbols()) {
      if (symbol == ACCEL_PLUGIN_ENTRY_V1_NAME) {
        has_entry = true;
      } else if (symbol.rfind("accel_plugin_init_v", 0) != 0) {
        others += (others.empty() ? "" : ", ") + symbol;
      }
    }
    if (!has_entry) throw std::runtime_error("does not export " ACCEL_PLUGIN_ENTRY_V1_NAME);
    if (!others.empty()) {
      throw std::runtime_error("exports more than its entry symbols (build with -fvisibility=hidden): " +
                               others.substr(0, 200));
    }
    return std::string(ACCEL_PLUGIN_ENTRY_V1_NAME " only");
  });

  runtime::HostContext context;
  std::unique_ptr<plugin::LoadedPlugin> loaded;
  bool parallel_without_reduction = false;
  bool reduces_grads = false;
  if (!report.check("descriptor", [&] {
        loaded = plugin::LoadedPlugin::load(file, "", context, /*info_only=*/true);
        const AccelPluginDescriptor& d = loaded->descriptor();
        reduces_grads = d.capabilities & ACCEL_CAP_REDUCES_GRADS;
        parallel_without_reduction = d.kind == ACCEL_PLUGIN_PARALLEL && !reduces_grads;
        return strformat("'%s' %s, ABI %u.%u, %zu option(s), loads RTLD_NOW|RTLD_LOCAL and validates", d.name,
                         d.version, d.abi_version.major, d.abi_version.minor, d.num_options);
      })) {
    return report.finish();
  }
  loaded.reset();

  // Whole runs with the plugin: a tiny model, accumulation, a checkpoint,
  // then a resume that must hand the plugin its state back.
  const std::string dir = mpi.broadcast_from_root(mpi.rank() == 0 ? make_temp_dir() : std::string());
  std::vector<std::string> base = {"--plugin",  file.string(), "--model",      "gpt-tiny", "--n-layer", "1",
                                   "--seq-len", "16",          "--batch-size", "4",        "--grad-accum", "2",
                                   "--log-level", "error"};
  base.insert(base.end(), extra.begin(), extra.end());
  if (mpi.world_size() > 1 && parallel_without_reduction) {
    report.skip("lifecycle", "a parallel plugin that does not reduce gradients needs its data-parallel partner "
                             "to train on several ranks; pass it as --plugin");
  } else {
    std::vector<std::string> first = base;
    first.insert(first.end(), {"--steps", "3", "--save", dir});
    if (report.check("lifecycle", [&] {
          run_accel(first, mpi);
          return std::string("create, plan_model, setup, 3 steps x 2 micro-batches, save_state, teardown");
        })) {
      std::vector<std::string> second = base;
      second.insert(second.end(), {"--steps", "5", "--resume", dir});
      report.check("resume", [&] {
        run_accel(second, mpi);
        return std::string("setup (resuming), load_state, 2 more steps, teardown");
      });
    }
  }
  if (reduces_grads) {
    // N ranks must train the model one rank trains (check_data_parallel.h).
    std::vector<std::string> run = {"--plugin", file.string(), "--model",     "gpt-tiny", "--n-layer",
                                    "1",        "--seq-len",   "16",          "--log-level", "error"};
    run.insert(run.end(), extra.begin(), extra.end());
    const DataParallelVerdict verdict = check_data_parallel(run, dir, mpi);
    if (verdict.outcome == DataParallelVerdict::Outcome::skip) {
      report.skip("data-parallel", verdict.detail);
    } else {
      report.check("data-parallel", [&] {
        if (verdict.outcome == DataParallelVerdict::Outcome::fail) throw std::runtime_error(verdict.detail);
        return verdict.detail;
      });
    }
  }
  if (mpi.rank() == 0) {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  log::init(mpi.rank(), log::Level::info);
  return report.finish();
}

}  // namespace accel::app
