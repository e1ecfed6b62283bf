// spdlog behind the façade of log.h. The only file of the host that includes spdlog.
#include "host/util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <stdexcept>
#include <string>

namespace accel::log {
namespace {

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
    case Level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::shared_ptr<spdlog::logger>& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    // stderr, so that stdout stays clean for --help, --list-plugins and the like.
    auto made = spdlog::stderr_color_mt("accel");
    made->set_pattern("[%H:%M:%S.%e] [rank 0] [%^%l%$] %v");
    return made;
  }();
  return instance;
}

}  // namespace

Level parse_level(std::string_view name) {
  if (name == "trace") return Level::trace;
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn") return Level::warn;
  if (name == "error") return Level::error;
  if (name == "off") return Level::off;
  throw std::invalid_argument("unknown log level '" + std::string(name) +
                              "' (expected trace, debug, info, warn, error or off)");
}

void init(int rank, Level level, bool all_ranks) {
  Level effective = level;
  if (rank != 0 && !all_ranks && level < Level::warn) effective = Level::warn;
  auto& log = logger();
  log->set_pattern("[%H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%^%l%$] %v");
  log->set_level(to_spdlog(effective));
  log->flush_on(spdlog::level::warn);
}

bool enabled(Level level) { return logger()->should_log(to_spdlog(level)); }

void write(Level level, std::string_view message) {
  logger()->log(to_spdlog(level), "{}", message);
}

}  // namespace accel::log
