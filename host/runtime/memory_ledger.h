// The memory ledger of the metrics line: where this rank's resident memory
// is, by what holds it, measured where the bytes are handed out (the
// counting CPU allocator and the unit storage pool, host/model/
// tensor_memory.h and storage_pool.h), with the accounted categories of
// MemoryAccounting (what plugins and the host said each buffer is for) used
// only to split the tensors among model states and communication buffers.
//
// Parts (bytes, at one moment; they add up to "total", set beside "rss"):
//   model_states        parameters, gradients, optimizer state: full unit
//                       storage, shards, moments (accounted categories)
//   comm_buffers        plugins' communication, workspace and other buffers,
//                       and the MPI rings' scratch (in use or pooled,
//                       host/comm/ring_collectives.h)
//   activations         every other live tensor: what autograd saved for
//                       backward and the step's temporaries
//   allocator_caches    freed bytes the C allocator keeps for reuse (the
//                       unit pool's idle blocks hold no pages)
//   runtime             the rest of the C heap (MPI, LibTorch internals,
//                       containers), resident code, shared memory, and the
//                       non-heap anonymous memory the process had before
//                       its first tensor (relocated library data, stacks,
//                       MPI's own mappings; recorded once at start-up)
//   gathered_params     (inside model_states) full parameters of
//                       plugin-managed units alive now, from the pool
// "total" is the sum of the first five; "rss" is VmRSS at the same moment.
// The step's peak form is the ledger sampled after every unit's forward and
// backward (on the steps that report it), the sample where VmRSS was highest, with getrusage's peak beside
// it ("peak_rss") and the tensors' exact peak (allocator side, "tensor_peak").
//
// Thread-safety: loop thread only (reads process-wide atomics and /proc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host/model/gpt.h"
#include "host/runtime/host_context.h"
#include "host/runtime/memory_services.h"

namespace accel::runtime {

using LedgerParts = std::map<std::string, int64_t>;

// The ledger now ("total" and "rss" included).
LedgerParts ledger_now(const MemoryAccounting* accounted);

// Bytes of full parameter storage of the units whose storage a plugin
// manages that are alive now, counted by the pool (whatever keeps them).
int64_t managed_param_bytes_alive(const model::GptModel& model, const ModelPlan& plan);

// What the trainer samples during a step that reports them (begin_step's
// `sampled`: the metrics' logged steps, see the trainer): after each unit's
// forward (its post hooks done) the largest managed_param_bytes_alive, by
// unit name; and the ledger after every unit's forward and backward, keeping
// the sample of highest resident memory. On other steps nothing is sampled
// (each sample reads /proc and the C allocator's statistics: cheap against a
// CPU step, not against a fast GPU one), and the take_* calls return empty.
class StepMemoryWatch {
 public:
  void begin_step(bool sampled) { sampled_ = sampled; }
  bool sampled() const { return sampled_; }
  void after_forward(const model::GptModel& model, const ModelPlan* plan, size_t unit,
                     const MemoryAccounting* accounted);
  void after_backward(const MemoryAccounting* accounted);
  std::map<std::string, int64_t> take_alive_after_forward();
  // The peak sample with "peak_rss" and "tensor_peak" added (empty on a step
  // not sampled); then starts over.
  LedgerParts take_peak(const MemoryAccounting* accounted);

 private:
  void sample(const MemoryAccounting* accounted);

  bool sampled_ = true;
  std::map<std::string, int64_t> alive_;
  LedgerParts peak_;
};

}  // namespace accel::runtime
