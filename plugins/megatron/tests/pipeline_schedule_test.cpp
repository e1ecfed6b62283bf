// The pipeline's stage layouts and schedules (pipeline_schedule.h), checked
// the way they run: every stage's steps are simulated against the others,
// sends asynchronous and receives blocking, activations and gradients on
// separate channels — as pipeline_runner.cpp runs them. A schedule that
// deadlocks, receives a message meant for another micro-batch or chunk,
// runs a backward before its forward, or leaves a message unread fails.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "../pipeline_schedule.h"

namespace accel::megatron {
namespace {

struct Message {
  int32_t micro;
  int32_t chunk;  // the global chunk the message is for
  bool operator==(const Message& o) const { return micro == o.micro && chunk == o.chunk; }
};

struct Simulation {
  std::vector<int32_t> peak_in_flight;  // per stage
};

// Runs every stage's schedule to the end; fails the test on any violation.
// `forward_only`: an evaluation batch (forward_only_steps) instead.
Simulation simulate(PipelineSchedule schedule, int32_t stages, int32_t micro_batches, int32_t chunks,
                    int32_t num_units, bool forward_only = false) {
  const StagePlan plan = plan_pipeline_stages(num_units, stages, chunks);
  std::vector<std::vector<PipelineStep>> steps;
  for (int32_t s = 0; s < stages; ++s) {
    steps.push_back(forward_only ? forward_only_steps(micro_batches, chunks)
                                 : pipeline_steps(schedule, s, stages, micro_batches, chunks));
  }
  // (from, to, is_gradient) -> messages in flight, in send order.
  std::map<std::tuple<int32_t, int32_t, bool>, std::deque<Message>> channels;
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<int32_t> in_flight(static_cast<size_t>(stages), 0);
  Simulation result;
  result.peak_in_flight.assign(static_cast<size_t>(stages), 0);
  std::map<std::pair<int32_t, int32_t>, int> forward_done;  // (micro, global chunk)
  const int32_t total_chunks = stages * chunks;
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int32_t s = 0; s < stages; ++s) {
      auto& pc = next[static_cast<size_t>(s)];
      if (pc == steps[static_cast<size_t>(s)].size()) continue;
      const PipelineStep& step = steps[static_cast<size_t>(s)][pc];
      const int32_t c = step.chunk * stages + s;
      const UnitRange& range = plan.chunk(s, step.chunk);
      const int32_t previous = (s + stages - 1) % stages, following = (s + 1) % stages;
      if (step.forward) {
        if (range.first > 0) {
          auto& in = channels[{previous, s, false}];
          if (in.empty()) continue;  // blocks
          EXPECT_EQ(in.front(), (Message{step.micro, c})) << "stage " << s << " received the wrong activation";
          in.pop_front();
        }
        forward_done[{step.micro, c}] = 1;
        if (range.end < num_units) channels[{s, following, false}].push_back(Message{step.micro, c + 1});
        result.peak_in_flight[static_cast<size_t>(s)] =
            std::max(result.peak_in_flight[static_cast<size_t>(s)], ++in_flight[static_cast<size_t>(s)]);
      } else {
        EXPECT_EQ(forward_done.count({step.micro, c}), 1u) << "backward before forward on stage " << s;
        if (range.end < num_units) {
          auto& in = channels[{following, s, true}];
          if (in.empty()) continue;
          EXPECT_EQ(in.front(), (Message{step.micro, c})) << "stage " << s << " received the wrong gradient";
          in.pop_front();
        }
        if (range.first > 0) channels[{s, previous, true}].push_back(Message{step.micro, c - 1});
        --in_flight[static_cast<size_t>(s)];
      }
      ++pc;
      progressed = true;
    }
  }
  for (int32_t s = 0; s < stages; ++s) {
    EXPECT_EQ(next[static_cast<size_t>(s)], steps[static_cast<size_t>(s)].size())
        << "deadlock: stage " << s << " is stuck at step " << next[static_cast<size_t>(s)];
  }
  for (const auto& [key, queue] : channels) EXPECT_TRUE(queue.empty()) << "a message was never received";
  EXPECT_EQ(static_cast<int32_t>(forward_done.size()), micro_batches * total_chunks);
  return result;
}

TEST(PipelineSchedule, OneFOneBRunsWithoutDeadlockAndHoldsAtMostPMicroBatches) {
  for (int32_t stages : {1, 2, 3, 4}) {
    for (int32_t micro : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE(testing::Message() << "P " << stages << ", M " << micro);
      const Simulation sim = simulate(PipelineSchedule::one_f_one_b, stages, micro, 1, 6);
      for (int32_t s = 0; s < stages; ++s) {
        EXPECT_EQ(sim.peak_in_flight[static_cast<size_t>(s)], std::min(stages - s, micro));
      }
    }
  }
}

TEST(PipelineSchedule, GPipeHoldsEveryMicroBatch) {
  for (int32_t stages : {2, 4}) {
    for (int32_t micro : {1, 4, 8}) {
      SCOPED_TRACE(testing::Message() << "P " << stages << ", M " << micro);
      const Simulation sim = simulate(PipelineSchedule::gpipe, stages, micro, 1, 6);
      for (int32_t peak : sim.peak_in_flight) EXPECT_EQ(peak, micro);
    }
  }
}

TEST(PipelineSchedule, InterleavedRunsEveryChunkWithoutDeadlock) {
  for (int32_t stages : {2, 3, 4}) {
    for (int32_t chunks : {2, 3}) {
      for (int32_t groups : {1, 2, 3}) {
        const int32_t micro = stages * groups;
        SCOPED_TRACE(testing::Message() << "P " << stages << ", v " << chunks << ", M " << micro);
        const Simulation sim = simulate(PipelineSchedule::interleaved, stages, micro, chunks, stages * chunks + 2);
        // Warm-up forwards plus one: never more than the schedule's own count.
        for (int32_t s = 0; s < stages; ++s) {
          EXPECT_EQ(sim.peak_in_flight[static_cast<size_t>(s)],
                    peak_in_flight(pipeline_steps(PipelineSchedule::interleaved, s, stages, micro, chunks)));
          EXPECT_LE(sim.peak_in_flight[static_cast<size_t>(s)], micro * chunks);
        }
      }
    }
  }
}

TEST(PipelineSchedule, EvaluationForwardsRunWithoutDeadlock) {
  for (int32_t stages : {2, 3, 4}) {
    for (int32_t chunks : {1, 2}) {
      SCOPED_TRACE(testing::Message() << "P " << stages << ", v " << chunks);
      simulate(PipelineSchedule::one_f_one_b, stages, 5, chunks, stages * chunks + 2, /*forward_only=*/true);
    }
  }
}

TEST(PipelineSchedule, EveryChunkRunsItsMicroBatchesInOrder) {
  // The host marks micro-batch M - 1's backward as each unit's last
  // (gradients_ready): it must be every chunk's last backward.
  for (PipelineSchedule schedule : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    for (int32_t s = 0; s < 4; ++s) {
      std::vector<int32_t> backwards;
      for (const PipelineStep& step : pipeline_steps(schedule, s, 4, 8, 1)) {
        if (!step.forward) backwards.push_back(step.micro);
      }
      EXPECT_EQ(backwards, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    }
  }
  for (int32_t s = 0; s < 2; ++s) {
    std::map<int32_t, std::vector<int32_t>> by_chunk;
    for (const PipelineStep& step : pipeline_steps(PipelineSchedule::interleaved, s, 2, 4, 2)) {
      if (!step.forward) by_chunk[step.chunk].push_back(step.micro);
    }
    for (const auto& [chunk, micros] : by_chunk) EXPECT_EQ(micros, (std::vector<int32_t>{0, 1, 2, 3})) << chunk;
  }
}

TEST(PipelineStages, MegatronLayoutPutsEmbeddingFirstAndHeadLast) {
  // 4 blocks, 2 stages: [embedding, block 0, block 1], [block 2, block 3, head].
  const StagePlan two = plan_pipeline_stages(6, 2, 1);
  EXPECT_EQ(two.stage_of_unit, (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  // Interleaved, v = 2: chunks of one block alternate between the stages.
  const StagePlan interleaved = plan_pipeline_stages(6, 2, 2);
  EXPECT_EQ(interleaved.stage_of_unit, (std::vector<int32_t>{0, 0, 1, 0, 1, 1}));
  EXPECT_EQ(interleaved.chunk(0, 1).first, 3);
  EXPECT_EQ(interleaved.chunk(1, 1).end, 6);
  // 2 blocks on 4 stages: one unit each (the uneven spread).
  EXPECT_EQ(plan_pipeline_stages(4, 4, 1).stage_of_unit, (std::vector<int32_t>{0, 1, 2, 3}));
  // 3 blocks on 2 stages: units spread evenly, the last stage the larger.
  EXPECT_EQ(plan_pipeline_stages(5, 2, 1).stage_of_unit, (std::vector<int32_t>{0, 0, 1, 1, 1}));
}

TEST(PipelineStages, RefusesWhatCannotBeLaidOut) {
  EXPECT_THROW(plan_pipeline_stages(4, 5, 1), std::invalid_argument);  // more stages than units
  EXPECT_THROW(plan_pipeline_stages(5, 2, 2), std::invalid_argument);  // 3 blocks in 4 chunks
  EXPECT_THROW(pipeline_steps(PipelineSchedule::interleaved, 0, 2, 3, 2), std::invalid_argument);  // M % P
  EXPECT_THROW(pipeline_steps(PipelineSchedule::gpipe, 0, 2, 4, 2), std::invalid_argument);
  EXPECT_THROW(parse_pipeline_schedule("zero-bubble"), std::invalid_argument);
}

}  // namespace
}  // namespace accel::megatron
