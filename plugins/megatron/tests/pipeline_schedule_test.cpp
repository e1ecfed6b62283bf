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

// How sends complete. mpi: buffered (MPI_Isend, the CPU path): a send never
// waits. nccl: each group's operations on a rank run in order on one stream,
// and a send completes only together with its receive (rendezvous), so a
// receive queued behind a send waits for that send's peer.
enum class Transport { mpi, nccl };

struct Simulation {
  bool deadlocked = false;
  std::vector<int32_t> peak_in_flight;  // per stage
};

// The groups pipeline_runner.cpp sends over: one per kind, and with
// `wrap_groups` one more per kind for the last-to-first link.
int32_t group_of(bool gradient, int32_t from, int32_t to, int32_t stages, bool wrap_groups) {
  const bool wraps = gradient ? (from == 0 && to == stages - 1) : (from == stages - 1 && to == 0);
  return (gradient ? 1 : 0) + (wrap_groups && wraps && stages > 1 ? 2 : 0);
}

// Runs every stage's schedule as far as it goes: receives block the stage,
// sends are asynchronous. Fails the test on a message received by the wrong
// micro-batch or chunk, a backward before its forward, or a message left
// unread; reports a deadlock instead of failing (the caller decides).
Simulation simulate(PipelineSchedule schedule, int32_t stages, int32_t micro_batches, int32_t chunks,
                    int32_t num_units, bool forward_only = false, Transport transport = Transport::mpi,
                    bool wrap_groups = true) {
  const StagePlan plan = plan_pipeline_stages(num_units, stages, chunks);
  std::vector<std::vector<PipelineStep>> steps;
  for (int32_t s = 0; s < stages; ++s) {
    steps.push_back(forward_only ? forward_only_steps(micro_batches, chunks)
                                 : pipeline_steps(schedule, s, stages, micro_batches, chunks));
  }
  struct Op {
    bool send;
    int32_t peer;
    Message message;
  };
  // (rank, group) -> operations in issue order; mpi keeps only receives
  // here and delivers sends to `mailbox` at once.
  std::map<std::pair<int32_t, int32_t>, std::deque<Op>> queues;
  std::map<std::tuple<int32_t, int32_t, int32_t>, std::deque<Message>> mailbox;  // (from, to, group)
  std::map<std::pair<int32_t, int32_t>, int> received;  // (rank, step index) -> its receive completed
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<bool> waiting(static_cast<size_t>(stages), false);  // a receive issued, not completed
  std::vector<int32_t> in_flight(static_cast<size_t>(stages), 0);
  Simulation result;
  result.peak_in_flight.assign(static_cast<size_t>(stages), 0);
  std::map<std::pair<int32_t, int32_t>, int> forward_done;  // (micro, global chunk)

  const auto post_send = [&](int32_t from, int32_t to, int32_t group, Message m) {
    if (transport == Transport::mpi) {
      mailbox[{from, to, group}].push_back(m);
    } else {
      queues[{from, group}].push_back(Op{true, to, m});
    }
  };
  // Completes what can complete; true when anything did.
  const auto progress = [&]() {
    bool any = false;
    for (auto& [key, queue] : queues) {
      if (queue.empty()) continue;
      const auto [rank, group] = key;
      Op& head = queue.front();
      if (transport == Transport::mpi) {  // only receives are queued
        auto& box = mailbox[{head.peer, rank, group}];
        if (box.empty()) continue;
        EXPECT_EQ(box.front(), head.message) << "stage " << rank << " received the wrong message";
        box.pop_front();
        queue.pop_front();
        waiting[static_cast<size_t>(rank)] = false;
        any = true;
        continue;
      }
      if (head.send) continue;  // completes with its receive, below
      auto& peer_queue = queues[{head.peer, group}];
      if (peer_queue.empty() || !peer_queue.front().send || peer_queue.front().peer != rank) continue;
      EXPECT_EQ(peer_queue.front().message, head.message) << "stage " << rank << " received the wrong message";
      peer_queue.pop_front();
      queue.pop_front();
      waiting[static_cast<size_t>(rank)] = false;
      any = true;
    }
    return any;
  };

  bool progressed = true;
  while (progressed) {
    progressed = progress();
    for (int32_t s = 0; s < stages; ++s) {
      auto& pc = next[static_cast<size_t>(s)];
      if (pc == steps[static_cast<size_t>(s)].size() || waiting[static_cast<size_t>(s)]) continue;
      const PipelineStep& step = steps[static_cast<size_t>(s)][pc];
      const int32_t c = step.chunk * stages + s;
      const UnitRange& range = plan.chunk(s, step.chunk);
      const int32_t previous = (s + stages - 1) % stages, following = (s + 1) % stages;
      const bool needs = step.forward ? range.first > 0 : range.end < num_units;
      if (needs && received.count({s, static_cast<int32_t>(pc)}) == 0) {
        // Issue the receive, then wait for it.
        const int32_t from = step.forward ? previous : following;
        queues[{s, group_of(!step.forward, from, s, stages, wrap_groups)}].push_back(
            Op{false, from, Message{step.micro, c}});
        received[{s, static_cast<int32_t>(pc)}] = 1;
        waiting[static_cast<size_t>(s)] = true;
        progressed = true;
        continue;
      }
      if (step.forward) {
        forward_done[{step.micro, c}] = 1;
        if (range.end < num_units) {
          post_send(s, following, group_of(false, s, following, stages, wrap_groups), Message{step.micro, c + 1});
        }
        result.peak_in_flight[static_cast<size_t>(s)] =
            std::max(result.peak_in_flight[static_cast<size_t>(s)], ++in_flight[static_cast<size_t>(s)]);
      } else {
        EXPECT_EQ(forward_done.count({step.micro, c}), 1u) << "backward before forward on stage " << s;
        if (range.first > 0) {
          post_send(s, previous, group_of(true, s, previous, stages, wrap_groups), Message{step.micro, c - 1});
        }
        --in_flight[static_cast<size_t>(s)];
      }
      ++pc;
      progressed = true;
    }
  }
  for (int32_t s = 0; s < stages; ++s) {
    if (next[static_cast<size_t>(s)] != steps[static_cast<size_t>(s)].size()) result.deadlocked = true;
  }
  if (result.deadlocked) return result;
  for (const auto& [key, queue] : queues) EXPECT_TRUE(queue.empty()) << "an operation never completed";
  for (const auto& [key, box] : mailbox) EXPECT_TRUE(box.empty()) << "a message was never received";
  EXPECT_EQ(static_cast<int32_t>(forward_done.size()), micro_batches * stages * chunks);
  return result;
}

// Both transports, expecting no deadlock.
Simulation simulate_both(PipelineSchedule schedule, int32_t stages, int32_t micro_batches, int32_t chunks,
                         int32_t num_units, bool forward_only = false) {
  const Simulation nccl =
      simulate(schedule, stages, micro_batches, chunks, num_units, forward_only, Transport::nccl);
  EXPECT_FALSE(nccl.deadlocked) << "deadlock with in-order, rendezvous groups (NCCL)";
  const Simulation mpi = simulate(schedule, stages, micro_batches, chunks, num_units, forward_only, Transport::mpi);
  EXPECT_FALSE(mpi.deadlocked) << "deadlock with buffered sends (MPI)";
  EXPECT_EQ(mpi.peak_in_flight, nccl.peak_in_flight);
  return mpi;
}

TEST(PipelineSchedule, OneFOneBRunsWithoutDeadlockAndHoldsAtMostPMicroBatches) {
  for (int32_t stages : {1, 2, 3, 4}) {
    for (int32_t micro : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE(testing::Message() << "P " << stages << ", M " << micro);
      const Simulation sim = simulate_both(PipelineSchedule::one_f_one_b, stages, micro, 1, 6);
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
      const Simulation sim = simulate_both(PipelineSchedule::gpipe, stages, micro, 1, 6);
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
        const Simulation sim = simulate_both(PipelineSchedule::interleaved, stages, micro, chunks, stages * chunks + 2);
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

TEST(PipelineSchedule, InterleavedWrapNeedsItsOwnGroupsOnNccl) {
  // Why pipeline_runner.cpp gives the last-to-first link groups of its own:
  // sharing the stages' in-order stream, a wrap message queued behind a
  // forward one closes a cycle (P = 2, v = 2, M = 2: stage 0's send of
  // micro-batch 1 waits for stage 1's receive, queued behind stage 1's wrap
  // send to stage 0, whose receive is queued behind that first send).
  EXPECT_TRUE(simulate(PipelineSchedule::interleaved, 2, 2, 2, 6, false, Transport::nccl, /*wrap_groups=*/false)
                  .deadlocked);
  EXPECT_FALSE(simulate(PipelineSchedule::interleaved, 2, 2, 2, 6, false, Transport::nccl).deadlocked);
}

TEST(PipelineSchedule, EvaluationForwardsRunWithoutDeadlock) {
  for (int32_t stages : {2, 3, 4}) {
    for (int32_t chunks : {1, 2}) {
      SCOPED_TRACE(testing::Message() << "P " << stages << ", v " << chunks);
      simulate_both(PipelineSchedule::one_f_one_b, stages, 5, chunks, stages * chunks + 2, /*forward_only=*/true);
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
