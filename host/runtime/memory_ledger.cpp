// The measured memory ledger (see memory_ledger.h).
#include "host/runtime/memory_ledger.h"

#include <algorithm>

#include "host/comm/ring_collectives.h"
#include "host/model/storage_pool.h"
#include "host/model/tensor_memory.h"
#include "host/util/memory_stats.h"

namespace accel::runtime {
namespace {

int64_t accounted(const MemoryAccounting* memory, AccelMemoryCategory category) {
  if (memory == nullptr) return 0;
  int64_t bytes = 0;
  for (int place = 0; place < MemoryAccounting::kNumPlaces; ++place) {
    bytes += memory->counters(static_cast<AccelMemoryPlace>(place), category).current_bytes;
  }
  return bytes;
}

// The parts from the tensors' live bytes `tensors` and the non-tensor
// figures as they are now.
LedgerParts parts(const MemoryAccounting* memory, int64_t tensors) {
  const model::StoragePoolStats pool = model::storage_pool().stats();
  const MallocMemory heap = malloc_memory();
  const ResidentMemory resident = resident_memory();
  const int64_t model_states = accounted(memory, ACCEL_MEMORY_PARAMS) + accounted(memory, ACCEL_MEMORY_GRADS) +
                               accounted(memory, ACCEL_MEMORY_OPTIMIZER);
  const int64_t comm = accounted(memory, ACCEL_MEMORY_COMM) + accounted(memory, ACCEL_MEMORY_WORKSPACE) +
                       accounted(memory, ACCEL_MEMORY_OTHER) + accounted(memory, ACCEL_MEMORY_ACTIVATIONS);
  // Tensors from the C allocator are inside its in-use figure; the pool's
  // blocks are mapped directly and are not.
  const int64_t heap_tensors = model::tensor_memory().live_bytes - pool.in_use_bytes;
  // The rings' scratch is C heap but no tensor: moved from runtime to comm.
  const int64_t ring_scratch = comm::comm_scratch_bytes();
  LedgerParts p;
  p["model_states"] = model_states;
  p["comm_buffers"] = comm + ring_scratch;
  p["activations"] = std::max<int64_t>(0, tensors - model_states - comm);
  // The pool's idle blocks hold no pages (storage_pool.h): not counted.
  p["allocator_caches"] = heap.cached;
  p["runtime"] = std::max<int64_t>(0, heap.in_use - heap_tensors - ring_scratch) + resident.file + resident.shmem +
                 startup_non_heap_anon_bytes();
  int64_t total = 0;
  for (const auto& [name, bytes] : p) total += bytes;
  p["total"] = total;
  return p;
}

}  // namespace

LedgerParts ledger_now(const MemoryAccounting* memory) {
  LedgerParts p = parts(memory, model::tensor_memory().live_bytes);
  p["rss"] = resident_memory().total;
  return p;
}

int64_t managed_param_bytes_alive(const model::GptModel& model, const ModelPlan& plan) {
  int64_t bytes = 0;
  for (const auto& [unit, bits] : plan.managed_storage) {
    if ((bits & ACCEL_STORAGE_PARAMS) == 0) continue;
    bytes += model::storage_pool().in_use_bytes(model.units().at(static_cast<size_t>(unit)).params_tag());
  }
  return bytes;
}

void StepMemoryWatch::after_forward(const model::GptModel& model, const ModelPlan* plan, size_t unit,
                                    const MemoryAccounting* accounted) {
  if (!sampled_) return;
  if (plan != nullptr && !plan->managed_storage.empty()) {
    int64_t& seen = alive_[model.units().at(unit).name()];
    seen = std::max(seen, managed_param_bytes_alive(model, *plan));
  }
  sample(accounted);
}

void StepMemoryWatch::after_backward(const MemoryAccounting* accounted) {
  if (sampled_) sample(accounted);
}

void StepMemoryWatch::sample(const MemoryAccounting* accounted) {
  if (!model::counting_cpu_allocator_installed()) return;  // no ledger without the counting allocator
  LedgerParts now = ledger_now(accounted);
  if (peak_.empty() || now["rss"] > peak_["rss"]) peak_ = std::move(now);
}

std::map<std::string, int64_t> StepMemoryWatch::take_alive_after_forward() {
  std::map<std::string, int64_t> out;
  out.swap(alive_);
  return out;
}

LedgerParts StepMemoryWatch::take_peak(const MemoryAccounting* accounted) {
  LedgerParts out;
  if (!sampled_ || !model::counting_cpu_allocator_installed()) return out;
  sample(accounted);  // the step's end is a candidate too
  out.swap(peak_);
  out["peak_rss"] = peak_rss_bytes();
  out["tensor_peak"] = model::tensor_memory().peak_bytes;
  return out;
}

}  // namespace accel::runtime
