// cpu_adamw.h — the AdamW step of fp32 partitions held in host memory
// (optimizer offload: DeepSpeed's DeepSpeedCPUAdam role), fused into one
// pass over the four buffers, vectorised, and split across a small pool of
// threads the object keeps for its lifetime.
//
// When to call: in place of the host's adamw_step kernel service for
// buffers in host memory (kDLCPU, kDLCUDAHost), once per run of equal weight
// decay, as ShardedOptimizer does with the service. The caller handles what
// the service's optional arguments do: skip the call when found_inf is set,
// pass 1/loss scale as grad_scale, cast to a bf16 compute copy afterwards.
//
// Semantics: torch.optim.AdamW (decoupled weight decay, bias correction),
// with torch's single-tensor op order per element; see step(). Results do
// not depend on the thread count nor on which instruction set the CPU
// offers (no fused multiply-add, correctly rounded sqrt and division).
//
// Ownership: the caller owns every buffer; nothing is kept past a call.
// Thread-safety: one step() at a time per object (the pool serves one call);
// distinct objects may step concurrently.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace accel::sharding {

struct CpuAdamWHyper {
  double lr = 0.0;
  double beta1 = 0.0;  // in [0, 1)
  double beta2 = 0.0;  // in [0, 1)
  double eps = 0.0;
  double weight_decay = 0.0;  // decoupled: param *= 1 - lr * weight_decay
  int64_t step = 0;           // 1 on the first step; for bias correction
  float grad_scale = 1.0f;    // multiplies grad (1/loss scale, 1/accumulation)
};

class CpuAdamW {
 public:
  // Calls on fewer elements than this run on the caller alone. A parallel
  // call adds a wake and a finish through the condition variables: 4-5 us
  // when the other core is idle and awake, 20-30 us when its vCPU has halted
  // or another job holds it (bench/cpu_adamw, n = 128 on 2 threads, on the
  // 2-core VM): the time one thread steps 10K to 70K cached elements. There,
  // 2 threads first beat 1 at 256K elements with the other core mostly
  // free, and not below 1M with another job on it (median step;
  // docs/benchmarks.md, "CPU AdamW"). A machine that wakes threads faster
  // can pass a smaller threshold.
  static constexpr int64_t kDefaultMinParallelElements = 256 * 1024;

  // `threads`: the caller plus threads-1 workers started here; 0 = one per
  // hardware thread (std::thread::hardware_concurrency()). Throws
  // sdk::Error (INVALID_ARGUMENT) when either argument is negative.
  explicit CpuAdamW(int threads = 0, int64_t min_parallel_elements = kDefaultMinParallelElements);
  ~CpuAdamW();  // stops and joins the workers
  CpuAdamW(const CpuAdamW&) = delete;
  CpuAdamW& operator=(const CpuAdamW&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  int64_t min_parallel_elements() const { return min_parallel_elements_; }

  // One AdamW step over elements [0, n) of the four buffers, in place; they
  // must not overlap. Per element, in float (scalars computed in double,
  // rounded to float once):
  //   g = grad * grad_scale
  //   param *= 1 - lr * weight_decay            (skipped when weight_decay == 0)
  //   exp_avg += (1 - beta1) * (g - exp_avg)    (torch's lerp_)
  //   exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g
  //   denom = sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps
  //   param -= (lr / (1 - beta1^step)) * exp_avg / denom
  // Below min_parallel_elements() the caller steps alone; otherwise [0, n) is
  // cut into one contiguous chunk per thread, each a multiple of 64
  // elements but the last. Throws sdk::Error (INVALID_ARGUMENT) for n < 0,
  // step < 1, betas outside [0, 1) or a null buffer with n > 0; nothing is
  // written then.
  void step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const CpuAdamWHyper& h);

 private:
  // The call in flight, read by the workers between start and finish.
  struct Call {
    float* param = nullptr;
    const float* grad = nullptr;
    float* exp_avg = nullptr;
    float* exp_avg_sq = nullptr;
    int64_t n = 0;
    int64_t chunk = 0;  // elements per thread, a multiple of 64
    float grad_scale = 1.0f;
    float decay = 1.0f;  // 1 - lr * weight_decay
    bool decays = false;
    float beta1_weight = 0.0f;  // 1 - beta1
    float beta2 = 0.0f;
    float beta2_weight = 0.0f;  // 1 - beta2
    float bias_correction2_sqrt = 1.0f;
    float eps = 0.0f;
    float step_size = 0.0f;  // lr / bias_correction1
  };

  static void run_chunk(const Call& call, int index);  // thread `index`'s chunk (0: the caller's)
  void worker_loop(int index);
  void stop_workers();

  int64_t min_parallel_elements_;
  Call call_;
  std::mutex mu_;
  std::condition_variable start_;
  std::condition_variable finish_;
  uint64_t generation_ = 0;  // bumped per parallel call; workers wait for a new one
  int running_ = 0;          // workers still in the current call
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace accel::sharding
