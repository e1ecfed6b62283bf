// accel/sdk/sdk.hpp — the C++ plugin SDK in one include.
//
// A header-only convenience layer over the plain-C plugin ABI
// (accel/accel.h), compiled into the plugin: the boundary stays C, so a
// plugin built with any C++17 compiler and standard library runs in any host
// of ABI major 1. See docs/sdk.md.
//
//   accel/sdk/error.hpp     Error, format(), guard(): the exception barrier
//   accel/sdk/services.hpp  Services: identity, logging, options, metrics
//   accel/sdk/tensor.hpp    DLTensor helpers, read_scalar, Buffer
//   accel/sdk/kernels.hpp   Kernels: the kernel, memory, collective and unit storage services, typed
//   accel/sdk/plugin.hpp    Plugin, PluginInfo, Option, ACCEL_PLUGIN
#pragma once

#include "accel/sdk/error.hpp"     // IWYU pragma: export
#include "accel/sdk/kernels.hpp"   // IWYU pragma: export
#include "accel/sdk/plugin.hpp"    // IWYU pragma: export
#include "accel/sdk/services.hpp"  // IWYU pragma: export
#include "accel/sdk/tensor.hpp"    // IWYU pragma: export
