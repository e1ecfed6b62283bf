// The expert group's differentiable exchange (see expert_parallel.h).
#include "host/model/expert_parallel.h"

#include <torch/csrc/autograd/custom_function.h>

namespace accel::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels as an address in saved_data (the model, and its group,
// outlive every graph they build); the counts as int lists.
struct ExchangeRows : public torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, std::vector<int64_t> send_rows,
                            std::vector<int64_t> recv_rows, int64_t group) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    return reinterpret_cast<const ExpertGroup*>(group)->all_to_all_v(rows.contiguous(), send_rows, recv_rows);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& group = *reinterpret_cast<const ExpertGroup*>(ctx->saved_data["group"].toInt());
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    return {group.all_to_all_v(grads[0].contiguous(), recv, send), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor exchange_rows(const at::Tensor& rows, const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows, const ExpertGroup& group) {
  return ExchangeRows::apply(rows, send_rows, recv_rows, reinterpret_cast<int64_t>(&group));
}

}  // namespace accel::model
