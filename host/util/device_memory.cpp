// CUDA caching-allocator figures (see device_memory.h).
#include "host/util/device_memory.h"

#include <ATen/DeviceAccelerator.h>

namespace accel {

DeviceMemoryPeak device_memory_peak(const at::Device& device) {
  const auto stats = at::accelerator::getDeviceStats(device.index());
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return DeviceMemoryPeak{stats.allocated_bytes[kAll].peak, stats.reserved_bytes[kAll].peak};
}

void reset_device_memory_peak(const at::Device& device) { at::accelerator::resetPeakStats(device.index()); }

}  // namespace accel
