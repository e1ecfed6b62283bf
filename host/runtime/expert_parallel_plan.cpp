// Resolving expert parallelism (see expert_parallel_plan.h).
#include "host/runtime/expert_parallel_plan.h"

#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/comm/process_group.h"
#include "host/runtime/aten_buffer.h"
#include "host/runtime/comm_checks.h"
#include "host/runtime/model_services.h"
#include "host/runtime/service_support.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

// Elements per dim-0 row of a contiguous tensor.
int64_t row_elements(const at::Tensor& t) { return t.dim() == 0 ? 1 : t.numel() / std::max<int64_t>(1, t.size(0)); }

// The model's exchanges over the expert group: the group's communicator,
// the bytes sent to other ranks counted into context.expert_parallel_bytes.
model::ExpertGroup make_expert_group(HostContext& context, comm::ProcessGroup& group) {
  model::ExpertGroup eg;
  eg.size = group.size();
  eg.rank = group.rank();
  HostContext* ctx = &context;
  eg.all_to_all_v = [ctx, &group](const at::Tensor& input, const std::vector<int64_t>& send_rows,
                                  const std::vector<int64_t>& recv_rows) {
    const int64_t row = row_elements(input);
    std::vector<int64_t> send(send_rows.size()), recv(recv_rows.size());
    int64_t received = 0, sent_away = 0;
    for (size_t j = 0; j < send.size(); ++j) {
      send[j] = send_rows[j] * row;
      recv[j] = recv_rows[j] * row;
      received += recv_rows[j];
      if (static_cast<int>(j) != group.rank()) sent_away += send[j];
    }
    std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
    shape[0] = received;
    at::Tensor out = at::empty(shape, input.options());
    complete_in_stream_order(group.all_to_all_v_async(buffer_of(input), std::span<const int64_t>(send), buffer_of(out),
                                                      std::span<const int64_t>(recv), {0, "host expert parallel"}),
                             buffer_of(out));
    ctx->expert_parallel_bytes += sent_away * static_cast<int64_t>(input.element_size());
    return out;
  };
  eg.all_gather = [&group](const at::Tensor& input) {
    std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
    shape[0] *= group.size();
    at::Tensor out = at::empty(shape, input.options());
    const comm::Status status =
        group.all_gather(buffer_of(input), buffer_of(out), {0, "host expert parallel checkpoint gather"});
    if (!status.ok()) throw std::runtime_error(status.message);
    return out;
  };
  return eg;
}

}  // namespace

void resolve_expert_parallel_plan(HostContext& context) {
  const int64_t parts = std::max(1, context.mesh.expert_size);
  if (parts == 1) return;
  model::GptModel& model = *context.model;
  const model::GptConfig& config = model.config();
  if (!config.has_experts()) {
    throw std::runtime_error(strformat("the mesh's expert size is %lld, but the model has no experts "
                                       "(a mixture of experts: --model moe-tiny, moe-small or --n-experts)",
                                       static_cast<long long>(parts)));
  }
  if (config.n_experts % parts != 0) {
    throw std::runtime_error(strformat("expert parallel size %lld does not divide the %lld experts of each layer",
                                       static_cast<long long>(parts), static_cast<long long>(config.n_experts)));
  }
  const auto standard = context.standard_groups.find(ACCEL_GROUP_EXPERT);
  if (standard == context.standard_groups.end()) {
    throw std::runtime_error("expert parallelism needs ranks: run under mpirun or accel-host launch");
  }
  comm::ProcessGroup& group = *resolve_group(context, standard->second).group;
  for (model::Unit& unit : model.units()) {
    std::vector<model::ParamSplit> splits;
    bool any = false;
    for (const model::Param& p : unit.params()) {
      splits.push_back(p.split);
      if (p.spec.role != model::ParamRole::experts) continue;
      model::ParamSplit& s = splits.back();
      s.dim = 0;
      s.parts = parts;
      s.index = group.rank();
      any = true;
    }
    if (any) unit.split_params(splits);
  }
  context.expert_parallel_size = parts;
  if (context.identity.rank == 0) {
    std::string ranks;
    for (int r : group.world_ranks()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    log::info(strformat("expert parallelism: each layer's %lld experts over %lld ranks, %lld each; rank 0's expert "
                        "group is world ranks [%s]",
                        static_cast<long long>(config.n_experts), static_cast<long long>(parts),
                        static_cast<long long>(config.n_experts / parts), ranks.c_str()));
  }
  model.set_expert_group(make_expert_group(context, group));
  if (context.model_view) context.model_view->refresh_layout();
}

int64_t take_expert_parallel_bytes(HostContext& context) { return context.expert_parallel_bytes.exchange(0); }

}  // namespace accel::runtime
