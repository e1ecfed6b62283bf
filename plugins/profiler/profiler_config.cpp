// The profiler's options (see profiler_config.h).
#include "profiler_config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace accel::profiler {

using accel::sdk::Error;

void parse_activities(const std::string& text, ProfilerConfig& config) {
  config.cpu = config.cuda = false;
  size_t pos = 0;
  bool any = false;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item == "cpu") {
      config.cpu = true;
    } else if (item == "cuda") {
      config.cuda = true;
    } else {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "--profiler.activities: '" + item +
                                                    "' is not an activity (allowed: cpu, cuda, comma-separated)");
    }
    any = true;
    pos = end + 1;
  }
  if (!any) throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "--profiler.activities: empty (allowed: cpu, cuda)");
}

void require_writable_dir(const std::string& dir, int32_t rank) {
  const auto refuse = [&](const std::string& why) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "--profiler.output_trace_dir: '" + dir + "' is not writable: " + why);
  };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) refuse(ec.message());
  if (!std::filesystem::is_directory(dir, ec)) refuse("not a directory");
  const std::string probe = dir + "/.profiler_probe_" + std::to_string(rank);
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr) refuse(std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
}

ProfilerConfig read_config(const accel::sdk::Services& s) {
  ProfilerConfig c;
  parse_activities(s.option<std::string>("activities"), c);
  c.schedule.wait = s.option<int64_t>("wait");
  c.schedule.warmup = s.option<int64_t>("warmup");
  c.schedule.active = s.option<int64_t>("active");
  c.schedule.repeat = s.option<int64_t>("repeat");
  c.schedule.skip_first = s.option<int64_t>("skip_first");
  // Like ProfileKwargs: no schedule_option means every step is recorded.
  for (const char* name : {"wait", "warmup", "active", "repeat", "skip_first"}) {
    c.schedule.enabled = c.schedule.enabled || s.option_is_set(name);
  }
  if (c.schedule.enabled && !cycle_length(c.schedule)) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                "--profiler.wait " + std::to_string(c.schedule.wait) + " + warmup " +
                    std::to_string(c.schedule.warmup) + " + active " + std::to_string(c.schedule.active) +
                    ": the schedule's cycle does not fit in a 64-bit step count");
  }
  c.record_shapes = s.option<bool>("record_shapes");
  c.profile_memory = s.option<bool>("profile_memory");
  c.with_stack = s.option<bool>("with_stack");
  c.with_flops = s.option<bool>("with_flops");
  c.with_modules = s.option<bool>("with_modules");
  const std::string dir = s.option<std::string>("output_trace_dir");
  if (!dir.empty()) {
    require_writable_dir(dir, s.rank());
    c.output_trace_dir = dir;
  }
  c.peak_tflops = s.option<double>("peak_tflops");
  c.row_limit = s.option<int64_t>("row_limit");
  c.clock_sync_rounds = s.option<int64_t>("clock_sync_rounds");
  c.test_straggler_rank = static_cast<int32_t>(s.option<int64_t>("test_straggler_rank"));
  c.test_straggler_ms = s.option<int64_t>("test_straggler_ms");
  return c;
}

}  // namespace accel::profiler
