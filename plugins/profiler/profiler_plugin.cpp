// profiler — torch.profiler for accel runs (ProfileKwargs, option by option
// in plugins/profiler/README.md). An observer: it records the host's own
// ranges (step, forward/backward per unit, plugin hooks, collectives with
// bytes and peers, checkpoint phases) and, with the cpu activity, LibTorch's
// operators captured inside the host (trace->set_detail, ABI 1.2), with the
// cuda activity on a CUDA rank the device's kernels (Kineto, ABI 1.3), during
// the steps its schedule (schedule.h) records. It writes, into
// output_trace_dir:
//   profile_<rank>.json          Chrome Trace Event Format, one per rank,
//                                rewritten at the end of every cycle
//                                (on_trace_ready) and at the end of the run;
//   profile_<rank>_summary.txt   the key_averages()-like table (also logged);
//   profile_merged.json          rank 0: every rank on rank 0's clock
//                                (clock_sync.h), collectives joined (merge.h).
//
// Capture is on only for the schedule's warmup and active steps; outside
// them the host's emits cost one check. Events arrive on any thread through
// trace_event into per-thread buffers (event_buffer.h); everything else runs
// on the loop thread. Built with the SDK against the ABI headers alone.
#include <accel/sdk/sdk.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "chrome_trace.h"
#include "clock_sync.h"
#include "event_buffer.h"
#include "flops.h"
#include "merge.h"
#include "messenger.h"
#include "profiler_config.h"
#include "schedule.h"
#include "summary.h"
#include "timeline.h"

namespace {

using accel::sdk::Error;
using namespace accel::profiler;

// Collectives of the clock alignment and the trace exchange wait at most
// this long for a peer (the end of a run must not hang on a lost rank).
constexpr int64_t kExchangeTimeoutMs = 60000;

class Profiler final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "profiler", "1.0.0",
      "Chrome traces of the host's ranges and LibTorch operators per rank, merged and clock-aligned (ProfileKwargs)",
      ACCEL_PLUGIN_OBSERVER, ACCEL_CAP_CPU | ACCEL_CAP_CUDA};

  // The schedule's counts are steps: the host's --steps maximum bounds each,
  // so wait + warmup + active always fits (the schedule checks the sum too).
  static constexpr const char* kMaxSteps = "1000000000";

  static constexpr accel::sdk::Option options[] = {
      {"activities", ACCEL_OPTION_STRING, "cpu,cuda",
       "what to record besides the host's own ranges: cpu (LibTorch operators), cuda (device ranges); comma-separated"},
      {"wait", ACCEL_OPTION_INT, "0", "schedule: idle steps at the start of each cycle", nullptr, "0", kMaxSteps},
      {"warmup", ACCEL_OPTION_INT, "0", "schedule: traced-and-discarded steps after wait", nullptr, "0", kMaxSteps},
      {"active", ACCEL_OPTION_INT, "1", "schedule: recorded steps of each cycle", nullptr, "1", kMaxSteps},
      {"repeat", ACCEL_OPTION_INT, "0", "schedule: number of cycles (0: until the run ends)", nullptr, "0", kMaxSteps},
      {"skip_first", ACCEL_OPTION_INT, "0", "schedule: steps skipped before the first cycle", nullptr, "0",
       kMaxSteps},
      {"record_shapes", ACCEL_OPTION_BOOL, "false", "record operators' input shapes and dtypes"},
      {"profile_memory", ACCEL_OPTION_BOOL, "false",
       "record allocations and frees, and a counter track per memory category"},
      {"with_stack", ACCEL_OPTION_BOOL, "false", "record each event's call path (step > unit > linear > operator)"},
      {"with_flops", ACCEL_OPTION_BOOL, "false", "count matmul and attention FLOPs; MFU per step against peak_tflops"},
      {"with_modules", ACCEL_OPTION_BOOL, "false", "record the unit (module) each event belongs to"},
      {"output_trace_dir", ACCEL_OPTION_STRING, nullptr,
       "directory for profile_<rank>.json, profile_merged.json and the summaries (unset: summary logged only)"},
      {"peak_tflops", ACCEL_OPTION_DOUBLE, "0", "peak TFLOP/s of one rank's device, for MFU (0: no MFU)", nullptr,
       "0"},
      {"row_limit", ACCEL_OPTION_INT, "20", "rows of the summary table", nullptr, "1", "1000000"},
      {"clock_sync_rounds", ACCEL_OPTION_INT, "20", "ping-pong rounds per rank when aligning clocks", nullptr, "1",
       "10000"},
      {"test_straggler_rank", ACCEL_OPTION_INT, "-1", "testing only: the rank that sleeps in every step_begin",
       nullptr, "-1", "2147483647"},
      {"test_straggler_ms", ACCEL_OPTION_INT, "0", "testing only: how long test_straggler_rank sleeps", nullptr, "0",
       "60000"},
  };

  explicit Profiler(const accel::sdk::Services& s)
      : Plugin(s), config_(read_config(s)), schedule_(config_.schedule), rank_(s.rank()), world_(s.world_size()) {}

  void setup(const AccelSetupArgs& args) override {
    first_step_ = args.first_step;
    read_unit_names();
    if (!config_.output_trace_dir.empty() && world_ > 1) {
      const Messenger messenger(services(), kExchangeTimeoutMs);
      start_clocks_ = measure_offsets(messenger, rank_, world_, static_cast<int>(config_.clock_sync_rounds));
    }
    const AccelTraceServices* trace = services().table()->trace;
    uint32_t detail = 0;
    if (config_.cpu || config_.with_flops) detail |= ACCEL_TRACE_DETAIL_OPERATORS;
    if (config_.record_shapes || config_.with_flops) detail |= ACCEL_TRACE_DETAIL_SHAPES;
    // Device kernels (Kineto/CUPTI) on a CUDA rank; a CPU rank or a 1.2 host
    // ignores the bit.
    if (config_.cuda) detail |= ACCEL_TRACE_DETAIL_KERNELS;
    if (detail != 0) {
      if (ACCEL_HAS_FN(trace, AccelTraceServices, set_detail)) {
        services().check(trace->set_detail(services().host(), detail), "set_detail");
        detail_set_ = true;
        operators_ = (detail & ACCEL_TRACE_DETAIL_OPERATORS) != 0;
      } else {
        services().log(ACCEL_LOG_WARN, "this host does not capture LibTorch operators (ABI < 1.2): the traces hold "
                                       "the host's own ranges only");
      }
    }
    set_capture(schedule_.captures(0));
  }

  // Evaluation steps (ACCEL_STEP_EVAL) are not steps of the schedule: their
  // ranges are captured when the training step around them is.
  void step_begin(const AccelStepArgs& args) override {
    if ((args.flags & ACCEL_STEP_EVAL) != 0) return;
    if (save_pending_) {
      save_pending_ = false;
      write_rank_trace();  // the cycle that ended with the last step
    }
    set_capture(schedule_.captures(index_));
    if (config_.test_straggler_ms > 0 && config_.test_straggler_rank == rank_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(config_.test_straggler_ms));
    }
  }

  void step_end(const AccelStepArgs& args) override {
    if ((args.flags & ACCEL_STEP_EVAL) != 0) return;
    const int64_t host_step = first_step_ + index_;
    if (config_.profile_memory && schedule_.records(index_)) record_memory_counters(host_step);
    save_pending_ = schedule_.action(index_) == StepAction::record_and_save;
    ++index_;
    // Capture for the next step; turned off only once this step's own
    // range has ended (trace_event sees its END), so it is whole.
    if (schedule_.captures(index_)) {
      set_capture(true);
    } else if (capturing_) {
      off_after_step_ = host_step;
    }
  }

  void trace_event(const AccelTraceEvent& event) override {
    if (event.type == ACCEL_TRACE_END && event.step == off_after_step_ && event.stream == nullptr &&
        event.source != nullptr && std::string(event.source) == "host" && std::string(event.name) == "step") {
      if (keeps(event)) buffer_.append(event);
      off_after_step_ = -2;
      set_capture(false);
      return;
    }
    if (!keeps(event)) return;
    buffer_.append(event);
  }

  void teardown() override {
    set_capture(false);
    const AccelTraceServices* trace = services().table()->trace;
    if (detail_set_) services().check(trace->set_detail(services().host(), 0), "set_detail");
    const Timeline timeline = write_rank_trace();
    const std::vector<StepFlops> steps = flops_per_step(timeline, config_.peak_tflops);
    const std::string table =
        summary_table(timeline, rank_, static_cast<size_t>(config_.row_limit), config_.with_flops, steps);
    size_t pos = 0;
    while (pos < table.size()) {
      const size_t end = table.find('\n', pos);
      services().log(ACCEL_LOG_INFO, table.substr(pos, end - pos).c_str());
      pos = end == std::string::npos ? table.size() : end + 1;
    }
    if (config_.output_trace_dir.empty()) return;
    write_or_throw(path("profile_" + std::to_string(rank_) + "_summary.txt"), table);
    write_merged_trace(timeline);
  }

 private:
  // Only what the options and the schedule ask for: events of recorded
  // steps; memory events with profile_memory; device ranges with cuda;
  // operators with cpu (the host delivers them only when asked anyway).
  bool keeps(const AccelTraceEvent& e) const {
    if (e.step < first_step_ || !schedule_.records(e.step - first_step_)) return false;
    const std::string category = e.category ? e.category : "";
    if (category == "memory" && !config_.profile_memory) return false;
    if (category == "operator" && !config_.cpu && !config_.with_flops) return false;
    if (e.stream != nullptr && !config_.cuda) return false;
    return true;
  }

  void set_capture(bool on) {
    if (on == capturing_) return;
    services().check(services().table()->trace->set_capture(services().host(), on), "set_capture");
    capturing_ = on;
  }

  void read_unit_names() {
    const AccelModelServices* model = services().table()->model;
    const AccelModelInfo* info = nullptr;
    if (model == nullptr || model->get_info == nullptr || model->get_info(services().host(), &info) != ACCEL_OK ||
        info == nullptr) {
      return;
    }
    for (int32_t u = 0; u < info->num_units; ++u) {
      const AccelUnitInfo* unit = nullptr;
      if (model->get_unit && model->get_unit(services().host(), u, &unit) == ACCEL_OK && unit && unit->name) {
        unit_names_.push_back(unit->name);
      } else {
        unit_names_.push_back("unit" + std::to_string(u));
      }
    }
  }

  // One COUNTER per memory category with the rank's current accounted
  // bytes: Perfetto draws each as its own counter track.
  void record_memory_counters(int64_t host_step) {
    static constexpr std::pair<AccelMemoryCategory, const char*> kCategories[] = {
        {ACCEL_MEMORY_PARAMS, "memory.params"},           {ACCEL_MEMORY_GRADS, "memory.grads"},
        {ACCEL_MEMORY_OPTIMIZER, "memory.optimizer"},     {ACCEL_MEMORY_ACTIVATIONS, "memory.activations"},
        {ACCEL_MEMORY_COMM, "memory.comm"},               {ACCEL_MEMORY_WORKSPACE, "memory.workspace"},
        {ACCEL_MEMORY_OTHER, "memory.other"},             {ACCEL_MEMORY_ALL, "memory.all"}};
    const AccelMemoryServices* memory = services().table()->memory;
    if (memory == nullptr || memory->stats == nullptr) return;
    for (const auto& [category, name] : kCategories) {
      AccelMemoryStats stats{};
      stats.struct_size = sizeof(stats);
      if (memory->stats(services().host(), ACCEL_MEMORY_DEVICE, category, &stats) != ACCEL_OK) continue;
      AccelTraceEvent e{};
      e.struct_size = sizeof(e);
      e.type = ACCEL_TRACE_COUNTER;
      e.rank = rank_;
      e.name = name;
      e.category = "memory";
      e.source = "host";
      e.timestamp_ns = monotonic_ns();
      e.step = host_step;
      e.unit = -1;
      e.micro_batch = -1;
      e.value = static_cast<double>(stats.current_bytes);
      buffer_.append(e);
    }
  }

  std::string path(const std::string& name) const { return config_.output_trace_dir + "/" + name; }

  void write_or_throw(const std::string& file, const std::string& text) const {
    std::string error;
    if (!write_file_atomically(file, text, &error)) throw Error(ACCEL_ERROR_INTERNAL, "cannot write " + error);
  }

  TraceStyle style() const {
    TraceStyle s;
    s.rank = rank_;
    s.record_shapes = config_.record_shapes;
    s.with_stack = config_.with_stack;
    s.with_modules = config_.with_modules;
    s.with_flops = config_.with_flops;
    s.unit_names = unit_names_;
    return s;
  }

  // Everything recorded so far as this rank's trace (on_trace_ready: each
  // cycle's end rewrites the file with every cycle recorded until then).
  Timeline write_rank_trace() {
    for (Event& e : buffer_.drain()) kept_.push_back(std::move(e));
    Timeline timeline = build_timeline(kept_);
    count_flops(timeline);
    if (!config_.output_trace_dir.empty()) {
      char schedule[160];
      const std::string other = "{\"rank\":" + std::to_string(rank_) + ",\"world_size\":" + std::to_string(world_) +
                                ",\"clock\":\"CLOCK_MONOTONIC\",\"schedule\":" +
                                json_string(schedule_.describe(schedule, sizeof schedule)) +
                                ",\"operators\":" + (operators_ ? "true" : "false") + "}";
      write_or_throw(path("profile_" + std::to_string(rank_) + ".json"),
                     trace_document({trace_events_json(timeline, style())}, other));
    }
    return timeline;
  }

  // Rank 0 measures the clocks again, hands every rank its alignment, and
  // gathers every rank's aligned events and collective parts.
  void write_merged_trace(const Timeline& timeline) {
    std::vector<ClockMap> clocks(static_cast<size_t>(world_));
    ClockMap mine;
    if (world_ > 1) {
      const Messenger messenger(services(), kExchangeTimeoutMs);
      const std::vector<ClockSample> end =
          measure_offsets(messenger, rank_, world_, static_cast<int>(config_.clock_sync_rounds));
      if (rank_ == 0) {
        for (int32_t r = 0; r < world_; ++r) {
          ClockMap& c = clocks[static_cast<size_t>(r)];
          c.start = start_clocks_.at(static_cast<size_t>(r));
          c.end = end.at(static_cast<size_t>(r));
          c.has_end = true;
          if (r > 0) messenger.send(r, c.pack());
        }
        mine = clocks[0];
      } else {
        mine = ClockMap::unpack(messenger.recv(0, ClockMap::kPackedSize));
      }
    }
    TraceStyle aligned = style();
    aligned.to_trace_ns = [mine](int64_t ns) { return mine.to_reference_ns(ns); };
    const std::string events = trace_events_json(timeline, aligned);
    const std::vector<int64_t> parts = pack_parts(collective_parts(timeline, mine, rank_));
    if (rank_ != 0) {
      const Messenger messenger(services(), kExchangeTimeoutMs);
      messenger.send_text(0, events);
      messenger.send(0, {static_cast<int64_t>(parts.size())});
      messenger.send(0, parts);
      return;
    }
    std::vector<std::string> fragments{events};
    std::vector<CollectivePart> all = unpack_parts(parts);
    const Messenger messenger(services(), kExchangeTimeoutMs);
    for (int32_t r = 1; r < world_; ++r) {
      fragments.push_back(messenger.recv_text(r));
      const int64_t count = messenger.recv(r, 1).at(0);
      for (const CollectivePart& p : unpack_parts(messenger.recv(r, static_cast<size_t>(count)))) all.push_back(p);
    }
    std::map<int32_t, int64_t> waited_for;
    fragments.push_back(flow_events_json(all, &waited_for));
    if (world_ == 1) clocks[0] = mine;
    write_or_throw(path("profile_merged.json"), trace_document(fragments, merged_other_data(clocks, waited_for)));
  }

  const ProfilerConfig config_;
  const Schedule schedule_;
  const int32_t rank_;
  const int32_t world_;
  int64_t first_step_ = 0;
  int64_t index_ = 0;            // this run's steps so far (the schedule's clock)
  bool capturing_ = false;
  bool operators_ = false;       // the host captures operators for us
  bool detail_set_ = false;      // set_detail was called: reset it at teardown
  bool save_pending_ = false;    // a cycle ended: write at the next step's start
  std::atomic<int64_t> off_after_step_{-2};  // turn capture off after this step's END
  std::vector<std::string> unit_names_;
  std::vector<ClockSample> start_clocks_;
  EventBuffer buffer_;
  std::vector<Event> kept_;      // drained events of every recorded step
};

}  // namespace

ACCEL_PLUGIN(Profiler)
