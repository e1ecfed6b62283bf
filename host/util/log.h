// Logging for the whole host, every line tagged with the rank.
//
// A thin façade over spdlog. It exists because spdlog (Debian, built on fmt 9)
// and LibTorch's headers (which ship fmt 12) cannot meet in one translation
// unit; so nothing outside log.cpp sees spdlog or fmt, and callers format with
// accel::strformat. Thread-safe: spdlog's multi-threaded sink is used.
#pragma once

#include <string>
#include <string_view>

namespace accel::log {

enum class Level { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

// Parses "trace|debug|info|warn|error|off"; throws std::invalid_argument otherwise.
Level parse_level(std::string_view name);

// Configures the process-wide logger. Only rank 0 prints below `warn` unless
// all_ranks is set: N ranks printing the same progress line is noise.
// May be called again (e.g. once the rank is known); not concurrently with logging.
void init(int rank, Level level, bool all_ranks = false);

bool enabled(Level level);
void write(Level level, std::string_view message);

inline void trace(std::string_view m) { write(Level::trace, m); }
inline void debug(std::string_view m) { write(Level::debug, m); }
inline void info(std::string_view m) { write(Level::info, m); }
inline void warn(std::string_view m) { write(Level::warn, m); }
inline void error(std::string_view m) { write(Level::error, m); }

}  // namespace accel::log
