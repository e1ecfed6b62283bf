// What a training step brings back to the host, and when. A CUDA rank's
// host stalls at every read of a device value until the device has run all
// that was queued before it, so a step keeps its values on the device --
// the loss averaged over the ranks with the two flags riding its all-reduce,
// whether the step is skipped, the gradient norm -- and reads them together
// once, after its optimizer step is queued. Where the verdict is needed on
// the host before the optimizer step (fp16 under a plugin that steps), the
// step reads early, and whatever is given after that read (a norm) makes a
// second read unless it is a host value already.
//
// Thread-safety: one training thread per StepValues.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace accel::runtime {
class HostContext;
}

namespace accel::train {

// `values` flattened and brought back to the host as doubles, in one copy:
// on a CUDA rank it waits for everything queued before it. Every read a
// step makes goes through here or through .item(): each is a "host_read"
// range in the trace (`context` may be null), which
// tests/python/test_host_syncs.py counts beside aten::_local_scalar_dense,
// what .item() calls.
std::vector<double> read_to_host(runtime::HostContext* context, const at::Tensor& values);

class StepValues {
 public:
  // `shared`: {the loss, a stop signal, this rank's background write done},
  // doubles on the rank's device, already averaged over the ranks.
  explicit StepValues(const at::Tensor& shared);

  // A 0-dim bool on the device: the averaged loss is not finite (the
  // weights would be lost, whatever the precision), or a verdict given to
  // skip_if holds.
  const at::Tensor& skip() const { return skip_; }
  // Or's `found_inf` (a 0-dim bool on the device; undefined: nothing) into
  // skip(). Before the read that is to see it.
  void skip_if(const at::Tensor& found_inf);
  // The gradient norm: a 0-dim tensor (read with the rest) or a host value.
  void set_grad_norm(const at::Tensor& norm);
  void set_grad_norm(double norm);

  // Reads what was given and not yet read: everything the first time, a
  // norm given since then the second; nothing left, nothing read.
  void read(runtime::HostContext* context);
  bool is_read() const { return read_; }

  // After read():
  double loss() const { return host_.at(0); }
  double stop_mean() const { return host_.at(1); }     // > 0: some rank holds a stop signal
  double written_mean() const { return host_.at(2); }  // 1: every rank's background write is done
  bool skipped() const { return host_.at(3) != 0.0; }
  bool has_grad_norm() const { return has_norm_; }
  double grad_norm() const { return norm_; }  // 0 where none was given

 private:
  at::Tensor shared_;
  at::Tensor skip_;
  at::Tensor pending_norm_;  // given on the device, not read yet
  std::vector<double> host_;
  bool read_ = false;
  bool has_norm_ = false;
  double norm_ = 0.0;
};

}  // namespace accel::train
