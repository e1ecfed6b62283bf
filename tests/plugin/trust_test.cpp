// The symlink-swap race against the plugin loader. A plugin path that is a
// symbolic link is swapped, as fast as a thread can, between a trusted file
// and an untrusted one (world-writable: refused whenever the check sees it)
// while the loader loads it again and again. A loader that checks a name and
// then opens the name again (for the ELF inspection, for dlopen) sooner or
// later maps the untrusted file, whose ELF constructor leaves a mark: the
// test fails on the mark. The loader that checks and loads one descriptor
// never maps it.
//
// Bounded: ACCEL_TRUST_RACE_SECONDS (default 2) or 20000 loads, whichever
// comes first. Against the loader that stat()ed the name and then opened it
// twice more, this test failed in 3 runs of 3, each within 0.3 s (17 to 154
// loads). Nothing here asserts on timing.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "host/plugin/loaded_plugin.h"
#include "host/plugin/plugin_error.h"
#include "host/runtime/host_context.h"

namespace {

namespace fs = std::filesystem;

fs::path make_temp_dir() {
  std::string pattern = (fs::temp_directory_path() / "accel_trust_XXXXXX").string();
  if (!::mkdtemp(pattern.data())) return {};
  return pattern;
}

double race_seconds() {
  const char* text = std::getenv("ACCEL_TRUST_RACE_SECONDS");
  return text ? std::atof(text) : 2.0;
}

TEST(PluginTrust, SymlinkSwappedDuringLoadsNeverRunsTheUntrustedFile) {
  const fs::path plugins = ACCEL_TEST_PLUGIN_ROOT;
  const fs::path dir = make_temp_dir();
  ASSERT_FALSE(dir.empty());
  fs::create_directories(dir / "trusted");
  fs::create_directories(dir / "untrusted");
  fs::create_directories(dir / "plugins");
  fs::copy_file(plugins / "swap_trusted" / "libaccel_swap.so", dir / "trusted" / "libaccel_swap.so");
  fs::copy_file(plugins / "swap_untrusted" / "libaccel_swap.so", dir / "untrusted" / "libaccel_swap.so");
  ASSERT_EQ(::chmod((dir / "untrusted" / "libaccel_swap.so").c_str(), 0666), 0);
  const fs::path link = dir / "plugins" / "libaccel_swap.so";
  const fs::path next = dir / "plugins" / ".next";
  fs::create_symlink("../trusted/libaccel_swap.so", link);
  const fs::path mark = dir / "untrusted_code_ran";
  ::setenv("ACCEL_TEST_UNTRUSTED_MARK", mark.c_str(), 1);

  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const char* targets[] = {"../untrusted/libaccel_swap.so", "../trusted/libaccel_swap.so"};
    for (size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      ::unlink(next.c_str());
      if (::symlink(targets[i % 2], next.c_str()) == 0) ::rename(next.c_str(), link.c_str());
    }
  });

  accel::runtime::HostContext context;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(race_seconds());
  int loaded = 0, refused = 0;
  std::string wrong;
  for (int i = 0; i < 20000 && std::chrono::steady_clock::now() < deadline && !fs::exists(mark); ++i) {
    try {
      const auto plugin = accel::plugin::LoadedPlugin::load(link, "swap", context, /*info_only=*/true);
      if (std::string(plugin->descriptor().description) != "trusted") wrong = plugin->descriptor().description;
      ++loaded;
    } catch (const accel::plugin::PluginError&) {
      ++refused;  // the untrusted file seen and refused: what should happen
    }
  }
  stop = true;
  swapper.join();
  std::printf("race: %d loads of the trusted file, %d refusals\n", loaded, refused);

  EXPECT_FALSE(fs::exists(mark)) << "the untrusted file's code ran in the host (after " << loaded << " loads and "
                                 << refused << " refusals)";
  EXPECT_EQ(wrong, "") << "a load returned the untrusted plugin";
  ::unsetenv("ACCEL_TEST_UNTRUSTED_MARK");
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

}  // namespace
