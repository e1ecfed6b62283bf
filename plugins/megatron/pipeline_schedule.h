// pipeline_schedule.h — where the model's units sit in a pipeline, and in
// which order each stage runs its micro-batches (Megatron-LM's schedules).
//
// Stages and chunks. The model is cut into P x v contiguous chunks of units
// (v = virtual stages per rank; 1 without interleaving); chunk c runs on
// stage c mod P, so a micro-batch's activation visits stage 0, 1, .., P-1
// v times over. When the blocks divide evenly (L mod (P x v) = 0), each
// chunk holds L / (P x v) blocks, the embedding joins the first chunk and
// the head the last (Megatron's layout). Without interleaving and an uneven
// count, the units themselves are spread as evenly as they go.
//
// Schedules, per stage s of P with M micro-batches (Narayanan et al. 2021):
//   gpipe        every forward, then every backward: a stage holds the
//                activations of all M micro-batches at its peak.
//   1f1b         P - s - 1 warm-up forwards, then one forward and one
//                backward in turn, then the cool-down backwards: at most
//                P - s micro-batches in flight. Bubble (P - 1) / M.
//   interleaved  1F1B over the v chunks of each stage, micro-batches in
//                groups of P (M must be a multiple of P): warm-up
//                2 (P - s - 1) + (v - 1) P forwards. Bubble (P - 1) / (v M).
// Every stage runs each chunk's micro-batches in increasing order, forward
// and backward, so the last micro-batch's backward is each unit's last.
//
// Pure functions of plain values: thread-safe, unit-tested
// (tests/pipeline_schedule_test.cpp simulates every stage against the
// others: no deadlock, matching send and receive orders).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::megatron {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved };

// "gpipe", "1f1b", "interleaved"; throws std::invalid_argument otherwise.
PipelineSchedule parse_pipeline_schedule(const std::string& name);
const char* to_string(PipelineSchedule schedule);

// Units [first, end) of the model: one chunk.
struct UnitRange {
  int32_t first = 0;
  int32_t end = 0;
};

struct StagePlan {
  int32_t stages = 1;
  int32_t chunks = 1;                  // per stage (v)
  std::vector<int32_t> stage_of_unit;  // what plan_stages receives
  std::vector<UnitRange> chunk_units;  // by global chunk c = k x P + s
  // Stage s's local chunk k.
  const UnitRange& chunk(int32_t stage, int32_t k) const { return chunk_units[static_cast<size_t>(k * stages + stage)]; }
};

// The layout of `num_units` units (an embedding, num_units - 2 blocks, a
// head) over `stages` x `chunks`. Throws std::invalid_argument with the
// reason: more stages than units, or interleaved chunks that do not divide
// the blocks.
StagePlan plan_pipeline_stages(int32_t num_units, int32_t stages, int32_t chunks);

// One entry of a stage's schedule: the forward or backward of local chunk
// `chunk` for micro-batch `micro`.
struct PipelineStep {
  bool forward = true;
  int32_t micro = 0;
  int32_t chunk = 0;
};

// Stage `stage`'s steps for one optimizer step. Throws std::invalid_argument
// when the schedule does not take the counts (interleaved with M not a
// multiple of P, gpipe or 1f1b with chunks > 1).
std::vector<PipelineStep> pipeline_steps(PipelineSchedule schedule, int32_t stage, int32_t stages,
                                         int32_t micro_batches, int32_t chunks);

// An evaluation batch on any stage: every micro-batch's forward, each
// through the stage's chunks in order, no backward.
std::vector<PipelineStep> forward_only_steps(int32_t micro_batches, int32_t chunks);

// The most micro-batches (summed over chunks) whose forward ran and whose
// backward did not, at any point of `steps`: the activations a stage holds.
int32_t peak_in_flight(const std::vector<PipelineStep>& steps);

}  // namespace accel::megatron
