// The model area: the ABI's view of GptModel{2 layers, 2 heads, 16 wide,
// seq 8, vocab 32} (units, parameters, roles, hints, the tied head), plan
// recording with its phase and conflict errors, and the run-phase views of
// host-kept storage.
#include <gtest/gtest.h>

#include <cstring>

#include <string>
#include <vector>

#include "host/model/storage_pool.h"
#include "host/runtime/pipeline_plan.h"
#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

class ModelServicesTest : public ServicesTest {
 protected:
  const AccelModelServices* m() { return services->model; }

  const AccelParamInfo* param(const char* name) {
    int32_t unit = -1, index = -1;
    EXPECT_EQ(m()->find_param(&host, name, &unit, &index), ACCEL_OK) << last_error();
    const AccelParamInfo* info = nullptr;
    EXPECT_EQ(m()->get_param(&host, unit, index, &info), ACCEL_OK) << last_error();
    return info;
  }
};

TEST_F(ModelServicesTest, ModelInfoDescribesTheGpt) {
  context.model_run.micro_batch_size = 4;
  const AccelModelInfo* info = nullptr;
  ASSERT_EQ(m()->get_info(&host, &info), ACCEL_OK) << last_error();
  EXPECT_EQ(info->struct_size, sizeof(AccelModelInfo));
  EXPECT_EQ(info->num_units, 4);
  EXPECT_EQ(info->hidden_size, 16);
  EXPECT_EQ(info->vocab_size, 32);
  EXPECT_EQ(info->seq_len, 8);
  EXPECT_EQ(info->micro_batch_size, 4);
  ASSERT_EQ(info->activation_ndim, 3);
  EXPECT_EQ(std::vector<int64_t>(info->activation_shape, info->activation_shape + 3),
            (std::vector<int64_t>{8, 4, 16}));
  EXPECT_EQ(info->num_params, model->num_parameters());
  EXPECT_EQ(info->flops_per_token, 6 * model->num_parameters() + 12 * 2 * 16 * 8);
  EXPECT_TRUE(accel_dtype_equal(info->param_dtype, accel_dtype(kDLFloat, 32)));
}

TEST_F(ModelServicesTest, UnitsMapKindsAndSizes) {
  const std::vector<std::pair<std::string, AccelUnitKind>> expected = {
      {"embedding", ACCEL_UNIT_EMBEDDING}, {"block.0", ACCEL_UNIT_BLOCK}, {"block.1", ACCEL_UNIT_BLOCK},
      {"head", ACCEL_UNIT_HEAD}};
  for (int32_t u = 0; u < 4; ++u) {
    const AccelUnitInfo* unit = nullptr;
    ASSERT_EQ(m()->get_unit(&host, u, &unit), ACCEL_OK) << last_error();
    EXPECT_EQ(unit->name, expected[u].first);
    EXPECT_EQ(unit->kind, expected[u].second);
    EXPECT_EQ(unit->index, u);
    EXPECT_EQ(unit->numel, model->units()[u].numel());
    EXPECT_EQ(unit->flags & ACCEL_UNIT_FLAG_LOCAL, ACCEL_UNIT_FLAG_LOCAL);
    EXPECT_EQ(unit->flags & ACCEL_UNIT_FLAG_PARAMS_MATERIALIZED, ACCEL_UNIT_FLAG_PARAMS_MATERIALIZED);
  }
  const AccelUnitInfo* unit = nullptr;
  EXPECT_EQ(m()->get_unit(&host, 4, &unit), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "get_unit: unit 4 does not exist (the model has 4)");
}

TEST_F(ModelServicesTest, ParamsCarryRolesHintsShapesAndFlatOffsets) {
  const AccelParamInfo* wte = param("wte.weight");
  EXPECT_EQ(wte->role, ACCEL_PARAM_EMBEDDING);
  EXPECT_EQ(wte->hint, ACCEL_PARALLEL_VOCAB);
  ASSERT_EQ(wte->ndim, 2);
  EXPECT_EQ(wte->global_shape[0], 32);
  EXPECT_EQ(wte->local_shape[1], 16);
  EXPECT_EQ(wte->local_offset[0], 0);
  EXPECT_EQ(wte->split_dim, -1);
  EXPECT_EQ(wte->split_blocks, 1);
  EXPECT_EQ(wte->split_parts, 1);
  EXPECT_EQ(wte->tied_unit, -1);

  const AccelParamInfo* qkv = param("h.1.attn.c_attn.weight");
  EXPECT_EQ(qkv->unit, 2);
  EXPECT_EQ(qkv->role, ACCEL_PARAM_LINEAR_WEIGHT);
  EXPECT_EQ(qkv->hint, ACCEL_PARALLEL_COLUMN);
  EXPECT_EQ(qkv->numel, 3 * 16 * 16);
  const model::Param& host_param = model->units()[2].params()[qkv->index];
  EXPECT_EQ(host_param.spec.name, "h.1.attn.c_attn.weight");
  EXPECT_EQ(qkv->flat_offset, host_param.offset);
  EXPECT_EQ(param("h.0.mlp.c_proj.weight")->hint, ACCEL_PARALLEL_ROW);
  EXPECT_EQ(param("h.0.ln_1.weight")->role, ACCEL_PARAM_NORM);
  EXPECT_EQ(param("h.0.attn.c_proj.bias")->role, ACCEL_PARAM_BIAS);

  // The head's output projection is the embedding: a tied reference.
  const AccelParamInfo* lm_head = param("lm_head.weight");
  EXPECT_EQ(lm_head->unit, 3);
  EXPECT_EQ(lm_head->flat_offset, -1);
  EXPECT_EQ(lm_head->tied_unit, wte->unit);
  EXPECT_EQ(lm_head->tied_index, wte->index);
  const AccelUnitInfo* head = nullptr;
  ASSERT_EQ(m()->get_unit(&host, 3, &head), ACCEL_OK);
  EXPECT_EQ(head->num_params, static_cast<int32_t>(model->units()[3].params().size()) + 1);

  int32_t unit = 0, index = 0;
  EXPECT_EQ(m()->find_param(&host, "no.such.weight", &unit, &index), ACCEL_ERROR_NOT_FOUND);
  EXPECT_NE(last_error().find("no.such.weight"), std::string::npos);
}

TEST_F(ModelServicesTest, WithoutAModelInspectionIsAPreconditionFailure) {
  context.model = nullptr;
  const AccelModelInfo* info = nullptr;
  EXPECT_EQ(m()->get_info(&host, &info), ACCEL_ERROR_FAILED_PRECONDITION);
}

TEST_F(ModelServicesTest, PlanServicesWorkOnlyInsidePlanModel) {
  EXPECT_EQ(m()->plan_split_param(&host, 1, 0, 0, ACCEL_GROUP_TENSOR), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(last_error(), "plan_split_param: allowed only inside the plan_model hook");
  EXPECT_EQ(m()->plan_manage_storage(&host, 1, ACCEL_STORAGE_PARAMS), ACCEL_ERROR_FAILED_PRECONDITION);
  const int32_t stages[] = {0, 0, 1, 1};
  EXPECT_EQ(m()->plan_stages(&host, stages, 4), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(m()->set_checkpointing(&host, 1, true), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_TRUE(context.plan.splits.empty());
}

TEST_F(ModelServicesTest, PlansAreRecordedAndConflictsRefused) {
  context.planning = true;
  const AccelParamInfo* qkv = param("h.0.attn.c_attn.weight");
  ASSERT_EQ(m()->plan_split_param(&host, qkv->unit, qkv->index, 0, ACCEL_GROUP_TENSOR), ACCEL_OK) << last_error();
  EXPECT_EQ(m()->plan_split_param(&host, qkv->unit, qkv->index, 0, ACCEL_GROUP_TENSOR), ACCEL_OK);  // same again
  EXPECT_EQ(m()->plan_split_param(&other_host, qkv->unit, qkv->index, 1, ACCEL_GROUP_TENSOR),
            ACCEL_ERROR_ALREADY_EXISTS);
  EXPECT_EQ(m()->plan_split_param(&host, qkv->unit, qkv->index, 2, ACCEL_GROUP_TENSOR), ACCEL_ERROR_INVALID_ARGUMENT);
  const AccelParamInfo* lm_head = param("lm_head.weight");
  EXPECT_EQ(m()->plan_split_param(&host, lm_head->unit, lm_head->index, 0, ACCEL_GROUP_TENSOR),
            ACCEL_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(context.plan.splits.size(), 1u);
  EXPECT_EQ(context.plan.splits[0].dim, 0);
  EXPECT_EQ(context.plan.splits[0].group, "tensor");

  const int32_t stages[] = {0, 0, 1, 1};
  ASSERT_EQ(m()->plan_stages(&host, stages, 4), ACCEL_OK);
  EXPECT_EQ(m()->plan_stages(&host, stages, 3), ACCEL_ERROR_INVALID_ARGUMENT);
  const int32_t other_stages[] = {0, 1, 1, 1};
  EXPECT_EQ(m()->plan_stages(&other_host, other_stages, 4), ACCEL_ERROR_ALREADY_EXISTS);

  ASSERT_EQ(m()->plan_manage_storage(&host, 1, ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS), ACCEL_OK);
  EXPECT_EQ(m()->plan_manage_storage(&other_host, 1, ACCEL_STORAGE_GRADS), ACCEL_ERROR_ALREADY_EXISTS);
  EXPECT_EQ(last_error(), "plan_manage_storage: the gradients of unit block.0 are already managed by plugin tester");
  ASSERT_EQ(m()->plan_manage_storage(&other_host, 2, ACCEL_STORAGE_GRADS), ACCEL_OK);
  EXPECT_EQ(m()->plan_manage_storage(&host, 2, 0), ACCEL_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(m()->set_checkpointing(&host, 2, true), ACCEL_OK);

  context.planning = false;  // plans resolve: the host keeps no storage of unit 1
  context.running = true;
  model->units()[1].release_params();
  model->units()[1].release_grads();
  const AccelUnitInfo* unit1 = nullptr;
  const AccelUnitInfo* unit2 = nullptr;
  ASSERT_EQ(m()->get_unit(&host, 1, &unit1), ACCEL_OK);
  ASSERT_EQ(m()->get_unit(&host, 2, &unit2), ACCEL_OK);
  EXPECT_EQ(unit1->flags & (ACCEL_UNIT_FLAG_PLUGIN_PARAMS | ACCEL_UNIT_FLAG_PLUGIN_GRADS),
            ACCEL_UNIT_FLAG_PLUGIN_PARAMS | ACCEL_UNIT_FLAG_PLUGIN_GRADS);
  EXPECT_EQ(unit1->flags & ACCEL_UNIT_FLAG_PARAMS_MATERIALIZED, 0u);
  EXPECT_EQ(unit2->flags & ACCEL_UNIT_FLAG_PLUGIN_PARAMS, 0u);
  EXPECT_EQ(unit2->flags & ACCEL_UNIT_FLAG_CHECKPOINTED, ACCEL_UNIT_FLAG_CHECKPOINTED);
  EXPECT_EQ(unit2->pipeline_stage, 1);
  EXPECT_EQ(unit2->flags & ACCEL_UNIT_FLAG_LOCAL, 0u);  // this rank is stage 0

  // Storage a plugin took over: absent until its manager materialises it.
  const DLTensor* params = reinterpret_cast<const DLTensor*>(0x1);
  ASSERT_EQ(m()->get_storage(&host, 1, &params, nullptr), ACCEL_OK);
  EXPECT_EQ(params, nullptr);
  const DLTensor* view = nullptr;
  EXPECT_EQ(m()->get_param_view(&host, 1, 0, ACCEL_STORAGE_PARAMS, &view), ACCEL_ERROR_FAILED_PRECONDITION);
  AccelMaterializeArgs mat{};
  mat.struct_size = sizeof(AccelMaterializeArgs);
  mat.unit = 1;
  mat.what = ACCEL_STORAGE_PARAMS;
  mat.init = ACCEL_INIT_FROM_SEED;
  EXPECT_EQ(m()->materialize(&other_host, &mat), ACCEL_ERROR_FAILED_PRECONDITION);  // not its manager
  EXPECT_NE(last_error().find("managed by plugin tester"), std::string::npos) << last_error();
  ASSERT_EQ(m()->materialize(&host, &mat), ACCEL_OK) << last_error();
  model::GptModel seeded(model->config());
  seeded.initialise(model->init_seed());
  const at::Tensor& expected = seeded.units()[1].flat_params();
  ASSERT_EQ(mat.params->shape[0], expected.numel());
  EXPECT_EQ(std::memcmp(accel_tensor_begin(mat.params), expected.data_ptr(), expected.nbytes()), 0);
  ASSERT_EQ(m()->get_unit(&host, 1, &unit1), ACCEL_OK);
  EXPECT_EQ(unit1->flags & ACCEL_UNIT_FLAG_PARAMS_MATERIALIZED, ACCEL_UNIT_FLAG_PARAMS_MATERIALIZED);
  EXPECT_EQ(unit1->flags & ACCEL_UNIT_FLAG_GRADS_MATERIALIZED, 0u);
  // Gradients must share the parameters' dtype (autograd accumulates into them).
  mat.what = ACCEL_STORAGE_GRADS;
  mat.init = ACCEL_INIT_ZERO;
  mat.grad_dtype = accel_dtype(kDLBfloat, 16);
  EXPECT_EQ(m()->materialize(&host, &mat), ACCEL_ERROR_INVALID_ARGUMENT);
  mat.grad_dtype = DLDataType{0, 0, 0};
  ASSERT_EQ(m()->materialize(&host, &mat), ACCEL_OK) << last_error();
  ASSERT_NE(mat.grads, nullptr);
  EXPECT_EQ(m()->release(&other_host, 1, ACCEL_STORAGE_GRADS, nullptr), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(m()->release(&host, 1, ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS, nullptr), ACCEL_OK);
  EXPECT_FALSE(model->units()[1].has_params());
  EXPECT_FALSE(model->units()[1].has_grads());
  // Re-materialised in bf16 (FSDP's param_dtype), with gradients to match.
  mat.what = ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS;
  mat.param_dtype = accel_dtype(kDLBfloat, 16);
  ASSERT_EQ(m()->materialize(&host, &mat), ACCEL_OK) << last_error();
  EXPECT_EQ(mat.params->dtype.code, kDLBfloat);
  EXPECT_EQ(mat.grads->dtype.code, kDLBfloat);
  EXPECT_EQ(m()->release(&host, 1, ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS, nullptr), ACCEL_OK);

  // Checkpointing may change between steps, not inside one.
  EXPECT_EQ(m()->set_checkpointing(&host, 2, false), ACCEL_OK);
  context.in_step = true;
  EXPECT_EQ(m()->set_checkpointing(&host, 2, true), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_FALSE(context.plan.checkpointing[2]);
}

// A released buffer is freed even though the plugin was handed views of it
// (the unit's storage and a parameter's gradient): the pool, where the bytes
// are handed out, counts none of them alive afterwards. Before the fix the
// views kept every released gradient buffer allocated until the unit was
// next materialised, so an fsdp rank held all its units' full gradients.
TEST_F(ModelServicesTest, ReleaseFreesBuffersWhoseViewsWereHandedOut) {
  context.planning = true;
  ASSERT_EQ(m()->plan_manage_storage(&host, 1, ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS), ACCEL_OK);
  context.planning = false;
  context.running = true;
  model::Unit& unit = model->units()[1];
  unit.release_params();
  unit.release_grads();
  const int64_t grads_before = model::storage_pool().in_use_bytes(unit.grads_tag());
  const int64_t params_before = model::storage_pool().in_use_bytes(unit.params_tag());

  AccelMaterializeArgs mat{};
  mat.struct_size = sizeof(AccelMaterializeArgs);
  mat.unit = 1;
  mat.what = ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS;
  mat.init = ACCEL_INIT_ZERO;
  ASSERT_EQ(m()->materialize(&host, &mat), ACCEL_OK) << last_error();
  const DLTensor* params = nullptr;
  const DLTensor* grads = nullptr;
  ASSERT_EQ(m()->get_storage(&host, 1, &params, &grads), ACCEL_OK) << last_error();
  const DLTensor* grad_view = nullptr;
  ASSERT_EQ(m()->get_param_view(&host, 1, 0, ACCEL_STORAGE_GRADS, &grad_view), ACCEL_OK) << last_error();
  const auto bytes = static_cast<int64_t>(unit.numel() * sizeof(float));
  EXPECT_GE(model::storage_pool().in_use_bytes(unit.grads_tag()) - grads_before, bytes);

  ASSERT_EQ(m()->release(&host, 1, ACCEL_STORAGE_GRADS, nullptr), ACCEL_OK) << last_error();
  EXPECT_EQ(model::storage_pool().in_use_bytes(unit.grads_tag()), grads_before);
  ASSERT_EQ(m()->release(&host, 1, ACCEL_STORAGE_PARAMS, nullptr), ACCEL_OK) << last_error();
  EXPECT_EQ(model::storage_pool().in_use_bytes(unit.params_tag()), params_before);
}

TEST_F(ModelServicesTest, HostKeptStorageIsViewedInPlace) {
  const DLTensor* params = nullptr;
  const DLTensor* grads = nullptr;
  EXPECT_EQ(m()->get_storage(&host, 0, &params, &grads), ACCEL_ERROR_FAILED_PRECONDITION);  // before setup
  context.running = true;
  ASSERT_EQ(m()->get_storage(&host, 0, &params, &grads), ACCEL_OK) << last_error();
  model::Unit& embedding = model->units()[0];
  ASSERT_EQ(params->ndim, 1);
  EXPECT_EQ(params->shape[0], embedding.numel());
  EXPECT_EQ(params->strides[0], 1);
  EXPECT_EQ(accel_tensor_begin(params), embedding.flat_params().data_ptr());
  EXPECT_EQ(accel_tensor_begin(grads), embedding.flat_grads().data_ptr());

  AccelMaterializeArgs mat{};
  mat.struct_size = sizeof(AccelMaterializeArgs);
  mat.unit = 0;
  mat.what = ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS;
  mat.init = ACCEL_INIT_ZERO;
  ASSERT_EQ(m()->materialize(&host, &mat), ACCEL_OK) << last_error();
  EXPECT_EQ(mat.params, params);  // already materialised: returned as it is
  EXPECT_EQ(mat.grads, grads);
  EXPECT_EQ(m()->release(&host, 0, ACCEL_STORAGE_PARAMS, nullptr), ACCEL_OK);
  mat.param_dtype = accel_dtype(kDLBfloat, 16);
  EXPECT_EQ(m()->materialize(&host, &mat), ACCEL_ERROR_UNSUPPORTED);
  mat.param_dtype = DLDataType{0, 0, 0};
  mat.init = ACCEL_INIT_FROM_SEED;  // only with PARAMS alone
  EXPECT_EQ(m()->materialize(&host, &mat), ACCEL_ERROR_INVALID_ARGUMENT);

  const AccelParamInfo* wpe = param("wpe.weight");
  const DLTensor* view = nullptr;
  ASSERT_EQ(m()->get_param_view(&host, wpe->unit, wpe->index, ACCEL_STORAGE_PARAMS, &view), ACCEL_OK);
  ASSERT_EQ(view->ndim, 2);
  EXPECT_EQ(view->shape[0], 8);
  EXPECT_EQ(view->shape[1], 16);
  const at::Tensor& value = embedding.param("wpe.weight").value;
  EXPECT_EQ(accel_tensor_begin(view), value.data_ptr());
  ASSERT_EQ(m()->get_param_view(&host, wpe->unit, wpe->index, ACCEL_STORAGE_GRADS, &view), ACCEL_OK);
  EXPECT_EQ(accel_tensor_begin(view), value.grad().data_ptr());

  const AccelParamInfo* lm_head = param("lm_head.weight");
  ASSERT_EQ(m()->get_param_view(&host, lm_head->unit, lm_head->index, ACCEL_STORAGE_PARAMS, &view), ACCEL_OK);
  EXPECT_EQ(accel_tensor_begin(view), embedding.param("wte.weight").value.data_ptr());
  EXPECT_EQ(m()->get_param_view(&host, 0, 0, ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS, &view),
            ACCEL_ERROR_INVALID_ARGUMENT);
}

// init_range (ABI 1.1): any range of a unit's initial values, computed alone,
// equals the same range of the materialised unit; the padded tail is zero.
TEST_F(ModelServicesTest, InitRangeComputesAnyRangeOfTheInitialValues) {
  context.running = true;
  model::GptModel seeded(model->config());
  seeded.initialise(model->init_seed());
  const at::Tensor& block = seeded.units()[1].flat_params();
  const int64_t numel = block.numel();
  for (int64_t begin : {int64_t{0}, int64_t{5}, numel / 3, numel - 7}) {
    at::Tensor out = at::full({10}, 42.0f);
    View view(out);
    ASSERT_EQ(m()->init_range(&host, 1, begin, view), ACCEL_OK) << last_error();
    const int64_t real = std::min<int64_t>(10, numel - begin);
    EXPECT_TRUE(at::equal(out.narrow(0, 0, real), block.narrow(0, begin, real))) << begin;
    if (real < 10) {
      EXPECT_EQ(out.narrow(0, real, 10 - real).abs().sum().item<float>(), 0.0f) << begin;
    }
  }
  at::Tensor half = at::empty({numel}, at::kBFloat16);
  View half_view(half);
  ASSERT_EQ(m()->init_range(&host, 1, 0, half_view), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(half, block.to(at::kBFloat16)));
  EXPECT_EQ(m()->init_range(&host, 1, -1, half_view), ACCEL_ERROR_INVALID_ARGUMENT);
  at::Tensor ints = at::empty({4}, at::kInt);
  View int_view(ints);
  EXPECT_EQ(m()->init_range(&host, 1, 0, int_view), ACCEL_ERROR_INVALID_ARGUMENT);
}


// --- pipeline stages (pipeline_plan.h) ---

TEST_F(ModelServicesTest, StagesResolveToThisRanksUnitsAndTheTiedCopy) {
  // 4 units (embedding, 2 blocks, head) on 2 stages; 4 ranks: 2 per stage.
  context.mesh.pipeline_size = 2;
  context.identity.world_size = 4;
  context.identity.rank = 3;  // the last stage
  context.plan.unit_stage = {0, 0, 1, 1};
  resolve_pipeline_plan(context);
  EXPECT_EQ(context.model_run.pipeline_stage, 1);
  EXPECT_FALSE(unit_is_local(context, 0));
  EXPECT_TRUE(is_tied_copy(context, 0));  // the tied head reads wte
  EXPECT_TRUE(holds_unit(context, 0));
  EXPECT_FALSE(holds_unit(context, 1));
  EXPECT_TRUE(unit_is_local(context, 3));
  const AccelUnitInfo* embedding = nullptr;
  ASSERT_EQ(m()->get_unit(&host, 0, &embedding), ACCEL_OK) << last_error();
  EXPECT_EQ(embedding->pipeline_stage, 0);
  EXPECT_EQ(embedding->flags & (ACCEL_UNIT_FLAG_LOCAL | ACCEL_UNIT_FLAG_TIED_COPY), ACCEL_UNIT_FLAG_TIED_COPY);

  context.identity.rank = 1;  // the first stage holds no copy
  resolve_pipeline_plan(context);
  EXPECT_EQ(context.model_run.pipeline_stage, 0);
  EXPECT_TRUE(context.model_run.tied_copies.empty());
  EXPECT_FALSE(holds_unit(context, 2));
}

TEST_F(ModelServicesTest, StagePlansThatDoNotFitAreRefusedNamingTheProblem) {
  context.identity.world_size = 2;
  context.mesh.pipeline_size = 2;
  const auto refused = [&](std::vector<int32_t> stages, const std::string& words) {
    context.plan.unit_stage = std::move(stages);
    try {
      resolve_pipeline_plan(context);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused({}, "no plugin assigned units");
  refused({0, 0, 0, 0}, "stage 1 without a unit");
  refused({0, 2, 1, 1}, "on stage 2, but the mesh has 2");
  refused({1, 0, 0, 1}, "the tokens enter on the first stage");
}

TEST_F(ModelServicesTest, RunServicesWorkOnlyInsideTrainStep) {
  context.running = true;
  AccelRunForwardArgs forward{};
  forward.struct_size = sizeof(forward);
  forward.end_unit = 4;
  EXPECT_EQ(m()->run_forward(&host, &forward), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(last_error(), "run_forward: only inside the train_step hook");
  AccelRunBackwardArgs backward{};
  backward.struct_size = sizeof(backward);
  backward.end_unit = 4;
  EXPECT_EQ(m()->run_backward(&host, &backward), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(m()->run_forward(&host, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace accel::runtime::testing
