// accel-host --list-plugins: every libaccel_*.so on the search path, loaded
// info-only (no hook runs), as a table; files that cannot be loaded are
// listed with the reason instead of stopping the listing.
#pragma once

#include <cstdio>
#include <filesystem>
#include <vector>

#include "host/runtime/host_context.h"

namespace accel::plugin {

void print_plugin_list(const std::vector<std::filesystem::path>& dirs, runtime::HostContext& context,
                       std::FILE* out);

}  // namespace accel::plugin
