// A step's values and its one read (see step_values.h).
#include "host/train/step_values.h"

#include <stdexcept>
#include <string>

#include "host/runtime/trace_scope.h"

namespace accel::train {

std::vector<double> read_to_host(runtime::HostContext* context, const at::Tensor& values) {
  const runtime::TraceRange range(context, "host_read", "host", "host", [] { return std::string(); }, -1, -1,
                                  static_cast<int64_t>(values.numel() * sizeof(double)));
  const at::Tensor host = values.detach().reshape({-1}).to(at::kCPU, at::kDouble).contiguous();
  const double* first = host.data_ptr<double>();
  return std::vector<double>(first, first + host.numel());
}

StepValues::StepValues(const at::Tensor& shared) : shared_(shared) {
  if (shared.dim() != 1 || shared.numel() != 3 || shared.scalar_type() != at::kDouble) {
    throw std::logic_error("StepValues: the shared values are {loss, stop, written} in fp64");
  }
  skip_ = shared_[0].isfinite().logical_not();
}

void StepValues::skip_if(const at::Tensor& found_inf) {
  if (!found_inf.defined()) return;
  if (read_) throw std::logic_error("StepValues: a skip verdict given after the read");
  skip_ = skip_.logical_or(found_inf.to(skip_.device()));
}

void StepValues::set_grad_norm(const at::Tensor& norm) {
  pending_norm_ = norm.detach().reshape({1}).to(shared_.device(), at::kDouble);
  has_norm_ = true;
}

void StepValues::set_grad_norm(double norm) {
  pending_norm_ = at::Tensor();
  norm_ = norm;
  has_norm_ = true;
}

void StepValues::read(runtime::HostContext* context) {
  if (!read_) {
    std::vector<at::Tensor> parts = {shared_, skip_.to(at::kDouble).reshape({1})};
    if (pending_norm_.defined()) parts.push_back(pending_norm_);
    host_ = read_to_host(context, at::cat(parts));
    if (pending_norm_.defined()) norm_ = host_.at(4);
    pending_norm_ = at::Tensor();
    read_ = true;
    return;
  }
  if (!pending_norm_.defined()) return;
  norm_ = read_to_host(context, pending_norm_).at(0);
  pending_norm_ = at::Tensor();
}

}  // namespace accel::train
