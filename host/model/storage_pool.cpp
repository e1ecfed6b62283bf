// The pool of plugin-managed unit storage (see storage_pool.h).
#include "host/model/storage_pool.h"

#include "host/model/tensor_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace accel::model {

struct StoragePool::Block {
  void* data = nullptr;
  size_t bytes = 0;  // mapped: a whole number of pages
  std::string tag;
  StoragePool* pool = nullptr;
};

namespace {

size_t page_rounded(size_t bytes) {
  static const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return std::max<size_t>(page, (bytes + page - 1) / page * page);
}

}  // namespace

c10::DataPtr StoragePool::allocate(size_t requested, const std::string& tag) {
  const size_t bytes = page_rounded(requested);
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = idle_.find(bytes);
    if (it != idle_.end()) {
      block = it->second;
      idle_.erase(it);
      stats_.idle_bytes -= static_cast<int64_t>(bytes);
      ++stats_.reused;
    } else {
      // Make room first: the pool never holds more than the plan's peak.
      const int64_t wanted = stats_.in_use_bytes + static_cast<int64_t>(bytes);
      trim_locked(std::max<int64_t>(stats_.high_water_bytes, wanted) - wanted);
    }
  }
  if (block == nullptr) {
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK_WITH(OutOfMemoryError, data != MAP_FAILED, "unit storage pool: cannot map ", bytes, " bytes for ",
                     tag);
    block = new Block{data, bytes, std::string(), this};
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.mapped;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  block->tag = tag;
  stats_.in_use_bytes += static_cast<int64_t>(bytes);
  stats_.high_water_bytes = std::max(stats_.high_water_bytes, stats_.in_use_bytes);
  in_use_by_tag_[tag] += static_cast<int64_t>(bytes);
  note_tensor_bytes(static_cast<int64_t>(bytes));
  return c10::DataPtr(block->data, block, &StoragePool::give_back, c10::Device(c10::DeviceType::CPU));
}

void StoragePool::give_back(void* context) {
  auto* block = static_cast<Block*>(context);
  block->pool->release(block);
}

void StoragePool::release(Block* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto bytes = static_cast<int64_t>(block->bytes);
  stats_.in_use_bytes -= bytes;
  note_tensor_bytes(-bytes);
  const auto tagged = in_use_by_tag_.find(block->tag);
  if (tagged != in_use_by_tag_.end() && (tagged->second -= bytes) == 0) in_use_by_tag_.erase(tagged);
  // The pages go back now (storage_pool.h): an idle block holds none.
  madvise(block->data, block->bytes, MADV_DONTNEED);
  idle_.emplace(block->bytes, block);
  stats_.idle_bytes += bytes;
  trim_locked(stats_.high_water_bytes - stats_.in_use_bytes);
}

void StoragePool::trim_locked(int64_t limit) {
  // Largest idle blocks first: fewest unmaps to get under the limit.
  while (stats_.idle_bytes > std::max<int64_t>(limit, 0) && !idle_.empty()) {
    const auto last = std::prev(idle_.end());
    Block* block = last->second;
    idle_.erase(last);
    stats_.idle_bytes -= static_cast<int64_t>(block->bytes);
    munmap(block->data, block->bytes);
    delete block;
  }
}

void StoragePool::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  trim_locked(0);
}

StoragePoolStats StoragePool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

int64_t StoragePool::in_use_bytes(const std::string& tag) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = in_use_by_tag_.find(tag);
  return it == in_use_by_tag_.end() ? 0 : it->second;
}

StoragePool& storage_pool() {
  static auto* pool = new StoragePool();
  return *pool;
}

}  // namespace accel::model
