// pipeline_schedule.cpp — stage layouts and schedules (see pipeline_schedule.h).
#include "pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace accel::megatron {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  if (name == "interleaved") return PipelineSchedule::interleaved;
  throw std::invalid_argument("unknown pipeline schedule '" + name + "' (gpipe, 1f1b, interleaved)");
}

const char* to_string(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::gpipe: return "gpipe";
    case PipelineSchedule::one_f_one_b: return "1f1b";
    case PipelineSchedule::interleaved: return "interleaved";
  }
  return "?";
}

StagePlan plan_pipeline_stages(int32_t num_units, int32_t stages, int32_t chunks) {
  if (stages < 1 || chunks < 1) throw std::invalid_argument("stages and chunks must be at least 1");
  const int32_t blocks = num_units - 2;  // between the embedding and the head
  const int32_t total = stages * chunks;
  StagePlan plan;
  plan.stages = stages;
  plan.chunks = chunks;
  if (blocks >= total && blocks % total == 0) {
    // Megatron's layout: equal blocks per chunk, the embedding and the head
    // with the first and the last.
    const int32_t per_chunk = blocks / total;
    for (int32_t c = 0; c < total; ++c) {
      const int32_t first = c == 0 ? 0 : 1 + c * per_chunk;
      const int32_t end = c == total - 1 ? num_units : 1 + (c + 1) * per_chunk;
      plan.chunk_units.push_back(UnitRange{first, end});
    }
  } else if (chunks > 1) {
    throw std::invalid_argument("the model's " + std::to_string(blocks) + " layers do not divide into " +
                                std::to_string(stages) + " stages x " + std::to_string(chunks) +
                                " virtual stages of equal layers");
  } else if (stages > num_units) {
    throw std::invalid_argument(std::to_string(stages) + " pipeline stages for a model of " +
                                std::to_string(num_units) + " units (embedding, " + std::to_string(blocks) +
                                " blocks, head): at most one stage per unit");
  } else {
    // Uneven: the units spread as evenly as they go, earlier stages the
    // smaller (the last also computes the loss).
    for (int32_t s = 0; s < stages; ++s) {
      plan.chunk_units.push_back(UnitRange{s * num_units / stages, (s + 1) * num_units / stages});
    }
  }
  plan.stage_of_unit.assign(static_cast<size_t>(num_units), 0);
  for (int32_t c = 0; c < total; ++c) {
    const UnitRange& r = plan.chunk_units[static_cast<size_t>(c)];
    for (int32_t u = r.first; u < r.end; ++u) plan.stage_of_unit[static_cast<size_t>(u)] = c % stages;
  }
  return plan;
}

namespace {

// Megatron's interleaved order: virtual micro-batch k of a stage (forward
// or backward) is micro-batch (k / (P v)) P + k mod P of local chunk
// (k mod (P v)) / P, reversed over the chunks in backward.
PipelineStep interleaved_step(bool forward, int32_t k, int32_t stages, int32_t chunks) {
  const int32_t group = stages * chunks;
  const int32_t in_group = k % group;
  PipelineStep step;
  step.forward = forward;
  step.micro = (k / group) * stages + in_group % stages;
  step.chunk = in_group / stages;
  if (!forward) step.chunk = chunks - 1 - step.chunk;
  return step;
}

}  // namespace

std::vector<PipelineStep> pipeline_steps(PipelineSchedule schedule, int32_t stage, int32_t stages,
                                         int32_t micro_batches, int32_t chunks) {
  if (stage < 0 || stage >= stages || micro_batches < 1) throw std::invalid_argument("bad stage or micro-batch count");
  std::vector<PipelineStep> steps;
  if (schedule != PipelineSchedule::interleaved && chunks != 1) {
    throw std::invalid_argument(std::string("the ") + to_string(schedule) +
                                " schedule runs one chunk per stage; virtual stages need the interleaved schedule");
  }
  if (schedule == PipelineSchedule::gpipe) {
    for (int32_t m = 0; m < micro_batches; ++m) steps.push_back(PipelineStep{true, m, 0});
    for (int32_t m = 0; m < micro_batches; ++m) steps.push_back(PipelineStep{false, m, 0});
    return steps;
  }
  if (schedule == PipelineSchedule::one_f_one_b) {
    const int32_t warmup = std::min(stages - stage - 1, micro_batches);
    int32_t forwards = 0, backwards = 0;
    for (; forwards < warmup; ++forwards) steps.push_back(PipelineStep{true, forwards, 0});
    while (forwards < micro_batches) {
      steps.push_back(PipelineStep{true, forwards++, 0});
      steps.push_back(PipelineStep{false, backwards++, 0});
    }
    while (backwards < micro_batches) steps.push_back(PipelineStep{false, backwards++, 0});
    return steps;
  }
  if (micro_batches % stages != 0) {
    throw std::invalid_argument("the interleaved schedule needs the micro-batches (" + std::to_string(micro_batches) +
                                ") to be a multiple of the pipeline stages (" + std::to_string(stages) + ")");
  }
  const int32_t total = micro_batches * chunks;
  const int32_t warmup =
      micro_batches == stages ? total : std::min(total, (stages - stage - 1) * 2 + (chunks - 1) * stages);
  int32_t forwards = 0, backwards = 0;
  for (; forwards < warmup; ++forwards) steps.push_back(interleaved_step(true, forwards, stages, chunks));
  while (forwards < total) {
    steps.push_back(interleaved_step(true, forwards++, stages, chunks));
    steps.push_back(interleaved_step(false, backwards++, stages, chunks));
  }
  while (backwards < total) steps.push_back(interleaved_step(false, backwards++, stages, chunks));
  return steps;
}

std::vector<PipelineStep> forward_only_steps(int32_t micro_batches, int32_t chunks) {
  std::vector<PipelineStep> steps;
  for (int32_t m = 0; m < micro_batches; ++m) {
    for (int32_t k = 0; k < chunks; ++k) steps.push_back(PipelineStep{true, m, k});
  }
  return steps;
}

int32_t peak_in_flight(const std::vector<PipelineStep>& steps) {
  int32_t now = 0, peak = 0;
  for (const PipelineStep& step : steps) {
    now += step.forward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

}  // namespace accel::megatron
