// The profiler's own logic, without a host: torch.profiler.schedule's step
// semantics, the clock alignment's offset/error/drift arithmetic, the merge
// (collective identity, the rank that arrived last, flow arrows), the
// Chrome-trace writer (escaping, BEGIN/END pairing, per-track order), the
// summary table's ordering and the FLOP counts. Each expectation is worked
// out by hand in the comment beside it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "chrome_trace.h"
#include "clock_sync.h"
#include "flops.h"
#include "merge.h"
#include "profiler_config.h"
#include "schedule.h"
#include "summary.h"
#include "timeline.h"

namespace accel::profiler {
namespace {

Event event(AccelTraceEventType type, const std::string& name, int64_t ts_ns, const std::string& category = "host",
            uint64_t thread = 1, int64_t step = 0, const std::string& detail = "") {
  Event e;
  e.type = type;
  e.name = name;
  e.category = category;
  e.source = "host";
  e.ts_ns = ts_ns;
  e.thread = thread;
  e.step = step;
  e.detail = detail;
  return e;
}

// A range [begin, end) on one thread: its BEGIN and END.
void range(std::vector<Event>& events, const std::string& name, int64_t begin, int64_t end,
           const std::string& category = "host", uint64_t thread = 1, int64_t step = 0,
           const std::string& detail = "") {
  events.push_back(event(ACCEL_TRACE_BEGIN, name, begin, category, thread, step, detail));
  events.push_back(event(ACCEL_TRACE_END, name, end, category, thread, step));
}

// ------------------------------- schedule --------------------------------

std::string actions(const Schedule& s, int64_t steps) {
  std::string out;
  for (int64_t i = 0; i < steps; ++i) {
    switch (s.action(i)) {
      case StepAction::none: out += '.'; break;
      case StepAction::warmup: out += 'w'; break;
      case StepAction::record: out += 'r'; break;
      case StepAction::record_and_save: out += 'S'; break;
    }
  }
  return out;
}

TEST(ProfilerSchedule, FollowsTorchScheduleStepForStep) {
  // skip_first=1, then cycles of wait 1, warmup 1, active 2; 2 cycles, then
  // nothing: torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2,
  // skip_first=1) gives NONE, [NONE, WARMUP, RECORD, RECORD_AND_SAVE] x 2,
  // NONE...
  ScheduleSpec spec;
  spec.enabled = true;
  spec.wait = 1;
  spec.warmup = 1;
  spec.active = 2;
  spec.repeat = 2;
  spec.skip_first = 1;
  const Schedule s(spec);
  EXPECT_EQ(actions(s, 12), "..wrS.wrS...");
  EXPECT_TRUE(s.captures(2));   // warmup is traced (and discarded)
  EXPECT_FALSE(s.records(2));
  EXPECT_TRUE(s.records(3));
  EXPECT_EQ(s.cycle(3), 0);
  EXPECT_EQ(s.cycle(7), 1);
  char text[128];
  EXPECT_STREQ(s.describe(text, sizeof text), "wait=1 warmup=1 active=2 repeat=2 skip_first=1");
}

TEST(ProfilerSchedule, RepeatZeroCyclesUntilTheEnd) {
  ScheduleSpec spec;
  spec.enabled = true;
  spec.wait = 2;
  spec.active = 1;  // every cycle's only active step also saves
  const Schedule s(spec);
  EXPECT_EQ(actions(s, 10), "..S..S..S.");
}

// Regression (issue 30): wait and warmup of INT64_MAX wrapped the cycle
// wait + warmup + active to 0, and the first step's `step % 0` killed the
// process with SIGFPE. The cycle is checked; a spec that does not fit is
// refused, one that just fits still schedules.
TEST(ProfilerSchedule, ACycleLongerThanInt64IsRefusedNotDividedByZero) {
  ScheduleSpec spec;
  spec.enabled = true;
  spec.wait = INT64_MAX;
  spec.warmup = INT64_MAX;
  spec.active = 2;  // the sum wraps to exactly 0
  EXPECT_FALSE(cycle_length(spec).has_value());
  EXPECT_THROW(Schedule{spec}, std::invalid_argument);
  spec.warmup = 0;
  spec.active = 1;  // wait + active wraps to INT64_MIN
  EXPECT_THROW(Schedule{spec}, std::invalid_argument);
  spec.wait = INT64_MAX - 1;  // fits exactly: every step waits
  const Schedule fits(spec);
  EXPECT_EQ(actions(fits, 3), "...");
}

TEST(ProfilerSchedule, WithoutAScheduleEveryStepIsRecorded) {
  const Schedule s{ScheduleSpec{}};
  EXPECT_EQ(actions(s, 4), "rrrr");  // saved at the run's end, not per cycle
  char text[32];
  EXPECT_STREQ(s.describe(text, sizeof text), "every step");
}

// ------------------------------- clock sync ------------------------------

TEST(ProfilerClockSync, SymmetricDelaysGiveTheExactOffset) {
  // Peer's clock = rank 0's + 1000; 50 ns each way; the peer answers 10 ns
  // after receiving: t1 100, t2 100+50+1000, t3 t2+10, t4 (t3-1000)+50.
  const ClockSample s = ntp_sample(100, 1150, 1160, 210);
  EXPECT_EQ(s.offset_ns, 1000);
  EXPECT_EQ(s.error_ns, 51);   // round trip (110 - 10) / 2, + 1
  EXPECT_EQ(s.local_ns, 1155);  // the middle of the peer's turn
}

TEST(ProfilerClockSync, AnAsymmetricRoundStaysWithinItsErrorBound) {
  // True offset 1000; 10 ns out, 190 ns back: the estimate is off by 90,
  // within the half round trip (100) the sample claims.
  const ClockSample s = ntp_sample(0, 1010, 1010, 200);
  EXPECT_EQ(s.offset_ns, 910);
  EXPECT_LE(std::llabs(s.offset_ns - 1000), s.error_ns);
}

TEST(ProfilerClockSync, TheShortestRoundTripIsKept) {
  const std::vector<ClockRound> rounds = {
      {0, 1500, 1500, 1000},     // round trip 1000
      {2000, 3040, 3050, 2090},  // round trip 80: offset ((1040) + (960)) / 2 = 1000
      {4000, 5300, 5300, 4600},  // round trip 600
  };
  const ClockSample best = best_sample(rounds);
  EXPECT_EQ(best.offset_ns, 1000);
  EXPECT_EQ(best.error_ns, 41);
}

TEST(ProfilerClockSync, DriftIsCorrectedLinearlyBetweenTheTwoSamples) {
  // Offset 1000 ns at local 0, 3000 ns at local 1 s: 2 ppm fast; halfway the
  // offset is 2000.
  ClockMap m;
  m.start = ClockSample{0, 1000, 40};
  m.end = ClockSample{1'000'000'000, 3000, 70};
  m.has_end = true;
  EXPECT_DOUBLE_EQ(m.to_reference_ns(500'000'000), 500'000'000.0 - 2000.0);
  EXPECT_DOUBLE_EQ(m.to_reference_ns(0), -1000.0);
  EXPECT_DOUBLE_EQ(m.drift_ppm(), 2.0);
  EXPECT_EQ(m.error_ns(), 70);  // the larger of the two samples' errors

  const ClockMap back = ClockMap::unpack(m.pack());
  EXPECT_EQ(back.pack(), m.pack());
  ClockMap start_only;
  start_only.start = ClockSample{0, 1000, 40};
  EXPECT_DOUBLE_EQ(start_only.to_reference_ns(5000), 4000.0);  // no end: a constant offset
  EXPECT_DOUBLE_EQ(start_only.drift_ppm(), 0.0);
}

// ------------------------------- timeline --------------------------------

TEST(ProfilerTimeline, BeginsAndEndsPairPerThreadAndOrphansAreDropped) {
  std::vector<Event> events;
  range(events, "step", 0, 1000);
  range(events, "forward", 100, 600);
  range(events, "forward", 150, 250, "host", 2);  // another thread, same name
  events.push_back(event(ACCEL_TRACE_END, "orphan", 700));     // its BEGIN was not captured
  events.push_back(event(ACCEL_TRACE_BEGIN, "dangling", 800));  // its END was not
  const Timeline t = build_timeline(events);
  ASSERT_EQ(t.slices.size(), 3u);
  EXPECT_EQ(t.begin_of(t.slices[0]).name, "step");
  EXPECT_EQ(t.slices[0].dur_ns, 1000);
  EXPECT_EQ(t.slices[0].self_ns, 500);  // minus forward's 500
  EXPECT_EQ(t.begin_of(t.slices[1]).name, "forward");
  EXPECT_EQ(t.slices[1].parent, 0);
  EXPECT_EQ(t.slices[2].track, 2u);
  EXPECT_EQ(t.slices[2].parent, -1);  // nothing open on thread 2
}

TEST(ProfilerTimeline, AnEndCarriesWhatItsBeginLacked) {
  std::vector<Event> events;
  events.push_back(event(ACCEL_TRACE_BEGIN, "all_reduce", 0, "comm"));
  Event end = event(ACCEL_TRACE_END, "all_reduce", 10, "comm", 1, 0, "seq=4; group_ranks=0,1");
  end.bytes = 64;
  events.push_back(end);
  const Timeline t = build_timeline(events);
  ASSERT_EQ(t.slices.size(), 1u);
  EXPECT_EQ(t.begin_of(t.slices[0]).detail, "seq=4; group_ranks=0,1");
  EXPECT_EQ(t.begin_of(t.slices[0]).bytes, 64);
  EXPECT_EQ(detail_value("seq=4; group_ranks=0,1", "group_ranks"), "0,1");
  EXPECT_EQ(detail_value("seq=4; group_ranks=0,1", "ranks"), "");  // a key's suffix is not the key
}

// ----------------------------- Chrome trace ------------------------------

TEST(ProfilerChromeTrace, StringsAreEscapedToValidJson) {
  const std::string odd = "a\"b\\c\nd\te\x01" "f";
  EXPECT_EQ(json_string(odd), "\"a\\\"b\\\\c\\nd\\te\\u0001f\"");
  EXPECT_EQ(nlohmann::json::parse(json_string(odd)).get<std::string>(), odd);
  EXPECT_EQ(json_us(1234567.0), "1234.567");
}

TEST(ProfilerChromeTrace, EveryRangeIsOneCompleteEventInTrackOrder) {
  std::vector<Event> events;
  range(events, "step", 0, 10'000);
  range(events, "forward", 1'000, 6'000);
  range(events, "aten::linear", 2'000, 5'000, "operator", 1, 0, "shapes=[4, 8], [2, 8]; dtypes=float, float");
  range(events, "aten::\"odd\"\nname", 7'000, 8'000, "operator");
  range(events, "backward", 500, 900, "host", 2);
  events.push_back(event(ACCEL_TRACE_END, "orphan", 9'500));
  Event counter = event(ACCEL_TRACE_COUNTER, "memory.all", 3'000, "memory");
  counter.value = 4096;
  events.push_back(counter);
  const Timeline t = build_timeline(events);
  TraceStyle style;
  style.rank = 3;
  style.with_stack = true;
  const std::string text = trace_document({trace_events_json(t, style)}, "{\"rank\":3}");
  const nlohmann::json doc = nlohmann::json::parse(text);  // throws on invalid JSON

  std::map<std::string, nlohmann::json> complete;
  std::map<int64_t, double> last_ts;  // per tid
  int counters = 0;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name"));
    EXPECT_EQ(e["pid"], 3);
    if (e["ph"] == "M") continue;
    const double ts = e["ts"];
    const int64_t tid = e["tid"];
    if (last_ts.count(tid)) {
      EXPECT_GE(ts, last_ts[tid]) << e.dump();
    }
    last_ts[tid] = ts;
    if (e["ph"] == "X") complete[e["name"]] = e;
    if (e["ph"] == "C") ++counters;
  }
  ASSERT_EQ(complete.size(), 5u);  // orphan left out
  EXPECT_EQ(complete.count("orphan"), 0u);
  EXPECT_DOUBLE_EQ(complete["step"]["dur"].get<double>(), 10.0);  // microseconds
  EXPECT_DOUBLE_EQ(complete["forward"]["ts"].get<double>(), 1.0);
  EXPECT_EQ(complete["aten::linear"]["args"]["stack"], "step > forward > aten::linear");
  EXPECT_FALSE(complete["aten::linear"]["args"].contains("Input Dims"));  // record_shapes off
  EXPECT_EQ(complete.count("aten::\"odd\"\nname"), 1u);
  EXPECT_EQ(complete["backward"]["tid"], 2);
  EXPECT_EQ(counters, 1);
  EXPECT_EQ(doc["otherData"]["rank"], 3);

  style.record_shapes = true;
  const nlohmann::json shapes = nlohmann::json::parse(trace_document({trace_events_json(t, style)}, ""));
  bool found = false;
  for (const auto& e : shapes["traceEvents"]) {
    if (e["name"] == "aten::linear") {
      EXPECT_EQ(e["args"]["Input Dims"], "[4, 8], [2, 8]");
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(ProfilerChromeTrace, FilesAreReplacedWholeOrNotAtAll) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "accel_profiler_logic_test";
  std::filesystem::create_directories(dir);
  std::string error;
  ASSERT_TRUE(write_file_atomically((dir / "t.json").string(), "{}", &error)) << error;
  EXPECT_FALSE(write_file_atomically((dir / "missing" / "t.json").string(), "{}", &error));
  EXPECT_NE(error.find("missing/t.json"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

// -------------------------------- summary --------------------------------

TEST(ProfilerSummary, RowsAreOrderedBySelfTimeAndCut) {
  std::vector<Event> events;
  range(events, "step", 0, 1'000'000);                      // self 1000 us - 850 us = 150 us
  range(events, "aten::mm", 0, 300'000, "operator");        // self 300 us (twice: 600 us)
  range(events, "aten::mm", 400'000, 700'000, "operator");
  range(events, "aten::add", 700'000, 950'000, "operator");  // self 250 us
  const Timeline t = build_timeline(events);
  const std::string table = summary_table(t, 0, 10, false, {});
  const size_t mm = table.find("aten::mm"), add = table.find("aten::add"), step = table.find("step ");
  ASSERT_NE(mm, std::string::npos);
  ASSERT_NE(add, std::string::npos);
  ASSERT_NE(step, std::string::npos);
  EXPECT_LT(mm, add);
  EXPECT_LT(add, step);
  EXPECT_NE(table.find("60.00%"), std::string::npos) << table;  // aten::mm: 600 of 1000 us
  EXPECT_NE(table.find("Self time total: 1.000ms"), std::string::npos) << table;

  const std::string cut = summary_table(t, 0, 2, false, {});
  EXPECT_EQ(cut.find("step "), std::string::npos) << cut;  // third by self time: cut
  EXPECT_NE(cut.find("top 2"), std::string::npos);
}

// --------------------------------- FLOPs ---------------------------------

TEST(ProfilerFlops, MatrixProductsAndAttentionCountTwicePerMultiplyAdd) {
  EXPECT_EQ(parse_shapes("shapes=[4, 64, 128], [384, 128], [384]; dtypes=float").size(), 3u);
  // linear: input [4, 64, 128] x weight [384, 128]: 2 * 256 * 128 * 384
  EXPECT_DOUBLE_EQ(operator_flops("aten::linear", {{4, 64, 128}, {384, 128}, {384}}), 2.0 * 256 * 128 * 384);
  // addmm(bias, [256, 128], [128, 384]): the same product
  EXPECT_DOUBLE_EQ(operator_flops("aten::addmm", {{384}, {256, 128}, {128, 384}}), 2.0 * 256 * 128 * 384);
  EXPECT_DOUBLE_EQ(operator_flops("aten::bmm", {{8, 16, 32}, {8, 32, 4}}), 2.0 * 8 * 16 * 32 * 4);
  // attention q, k, v [2, 4, 64, 16]: 2·B·H·L·S·(E + Ev) = 2 * 8 * 64 * 64 * 32
  const std::vector<std::vector<int64_t>> qkv = {{2, 4, 64, 16}, {2, 4, 64, 16}, {2, 4, 64, 16}};
  EXPECT_DOUBLE_EQ(operator_flops("aten::scaled_dot_product_attention", qkv), 2.0 * 8 * 64 * 64 * 32);
  EXPECT_DOUBLE_EQ(operator_flops("aten::_scaled_dot_product_flash_attention_backward", qkv),
                   2.0 * 2.0 * 8 * 64 * 64 * 32);
  EXPECT_EQ(operator_flops("aten::add", {{4}, {4}}), 0.0);
}

TEST(ProfilerFlops, ANestedProductIsNotCountedTwiceAndMfuFollowsThePeak) {
  std::vector<Event> events;
  range(events, "step", 0, 1'000'000'000, "host", 1, 7);  // one second
  range(events, "aten::linear", 100, 900, "operator", 1, 7, "shapes=[10, 20], [30, 20]; dtypes=float, float");
  range(events, "aten::addmm", 200, 800, "operator", 1, 7, "shapes=[30], [10, 20], [20, 30]; dtypes=float");
  Timeline t = build_timeline(events);
  count_flops(t);
  const double product = 2.0 * 10 * 20 * 30;  // 12000
  const std::vector<StepFlops> steps = flops_per_step(t, 1e-6);  // a peak of 1 MFLOP/s
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].step, 7);
  EXPECT_DOUBLE_EQ(steps[0].flops, product);  // linear counted, its addmm not
  EXPECT_DOUBLE_EQ(steps[0].mfu, product / 1e6);
  EXPECT_EQ(flops_per_step(t, 0.0)[0].mfu, 0.0);  // no peak, no MFU
}

// --------------------------------- merge ---------------------------------

Timeline one_collective(int64_t begin, int64_t end, const std::string& detail, int64_t step = 0) {
  std::vector<Event> events;
  range(events, "all_reduce", begin, end, "comm", 1, step, detail);
  return build_timeline(events);
}

TEST(ProfilerMerge, TheRankThatArrivedLastIsTheOneWaitedFor) {
  // Rank 1's clock runs 5000 ns ahead; on rank 0's clock it enters the
  // collective at 3000, after rank 0 (1000) and rank 2 (1500).
  ClockMap identity;
  ClockMap ahead;
  ahead.start = ClockSample{0, 5000, 10};
  const std::string detail = "seq=9; group_ranks=0,1,2";
  std::vector<CollectivePart> parts = collective_parts(one_collective(1000, 4000, detail), identity, 0);
  for (const CollectivePart& p : collective_parts(one_collective(8000, 9000, detail), ahead, 1)) parts.push_back(p);
  for (const CollectivePart& p : collective_parts(one_collective(1500, 4000, detail), identity, 2)) parts.push_back(p);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].key, parts[1].key);
  EXPECT_DOUBLE_EQ(parts[1].begin_ns, 3000.0);

  const std::vector<CollectivePart> travelled = unpack_parts(pack_parts(parts));
  ASSERT_EQ(travelled.size(), 3u);
  EXPECT_EQ(travelled[1].rank, 1);
  EXPECT_EQ(travelled[1].key, parts[1].key);

  std::map<int32_t, int64_t> waited_for;
  const std::string flows = flow_events_json(travelled, &waited_for);
  EXPECT_EQ(waited_for, (std::map<int32_t, int64_t>{{1, 1}}));
  const nlohmann::json arrows = nlohmann::json::parse("[" + flows + "]");
  ASSERT_EQ(arrows.size(), 4u);  // one start and one finish per waiting rank
  for (size_t i = 0; i < arrows.size(); i += 2) {
    EXPECT_EQ(arrows[i]["ph"], "s");
    EXPECT_EQ(arrows[i]["pid"], 1);  // from the late rank ...
    EXPECT_EQ(arrows[i + 1]["ph"], "f");
    EXPECT_NE(arrows[i + 1]["pid"], 1);  // ... to each rank that waited
    EXPECT_EQ(arrows[i]["id"], arrows[i + 1]["id"]);
  }
}

TEST(ProfilerMerge, CollectivesWithoutASequenceMatchByLabelStepAndOccurrence) {
  ClockMap identity;
  const auto two = [&](int32_t rank, int64_t offset) {
    std::vector<Event> events;
    range(events, "all_reduce", 100 + offset, 200 + offset, "comm", 1, 4, "label=loss");
    range(events, "all_reduce", 300 + offset, 400 + offset, "comm", 1, 4, "label=loss");
    return collective_parts(build_timeline(events), identity, rank);
  };
  const std::vector<CollectivePart> a = two(0, 0), b = two(1, 50);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_NE(a[0].key, a[1].key);  // first and second occurrence differ
  EXPECT_EQ(a[0].key, b[0].key);
  EXPECT_EQ(a[1].key, b[1].key);

  // A collective only one rank saw draws no arrow.
  std::map<int32_t, int64_t> waited_for;
  EXPECT_EQ(flow_events_json(a, &waited_for), "");
  EXPECT_TRUE(waited_for.empty());
}

TEST(ProfilerMerge, OtherDataRecordsEveryRanksAlignment) {
  std::vector<ClockMap> clocks(2);
  clocks[1].start = ClockSample{0, 2000, 30};
  clocks[1].end = ClockSample{1'000'000'000, 4000, 90};
  clocks[1].has_end = true;
  const nlohmann::json other = nlohmann::json::parse(merged_other_data(clocks, {{1, 3}}));
  EXPECT_DOUBLE_EQ(other["clock_alignment"]["1"]["offset_start_us"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(other["clock_alignment"]["1"]["offset_end_us"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(other["clock_alignment"]["1"]["drift_ppm"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(other["max_alignment_error_us"].get<double>(), 0.09);
  EXPECT_EQ(other["collectives_arrived_last"]["1"], 3);
}

// ------------------------------- bad input -------------------------------

TEST(ProfilerConfigCheck, UnknownActivitiesAndUnwritableDirectoriesAreRefused) {
  ProfilerConfig c;
  parse_activities(" cuda , cpu", c);
  EXPECT_TRUE(c.cpu && c.cuda);
  parse_activities("cuda", c);
  EXPECT_FALSE(c.cpu);
  try {
    parse_activities("cpu,gpu", c);
    FAIL() << "gpu accepted";
  } catch (const accel::sdk::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--profiler.activities: 'gpu' is not an activity (allowed: cpu, cuda, comma-separated)");
  }
  EXPECT_THROW(parse_activities("", c), accel::sdk::Error);

  const std::filesystem::path file = std::filesystem::temp_directory_path() / "accel_profiler_not_a_dir";
  std::FILE* f = std::fopen(file.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  try {
    require_writable_dir(file.string(), 0);
    FAIL() << "a file accepted as the output directory";
  } catch (const accel::sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profiler.output_trace_dir: '" + file.string() + "' is not writable"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace accel::profiler
