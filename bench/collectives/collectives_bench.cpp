// An nccl-tests-style benchmark of the communication layer: all_reduce,
// all_gather and reduce_scatter over doubling sizes, printing a markdown
// table of time, algorithm bandwidth and bus bandwidth, beside raw MPI on the
// same communicator — the blocking call (MPI_Allreduce, ...) and the
// non-blocking one polled with MPI_Test (what our MPI backend issues) — and
// our overhead over each.
//
// Definitions (nccl-tests, doc/PERFORMANCE.md): size S is the bytes of the
// full buffer (all_reduce: the buffer; all_gather: the gathered output;
// reduce_scatter: the input); algbw = S / t; busbw = algbw * 2(n-1)/n for
// all_reduce and algbw * (n-1)/n for all_gather and reduce_scatter. t is the
// slowest rank's mean time per operation; each variant runs in --rounds
// interleaved rounds and the median round is reported, so drift on a shared
// machine hits all variants alike.
//
//   mpirun -n 4 accel_collectives_bench [--min-bytes 8] [--max-bytes 64M]
//          [--ops all_reduce,all_gather,reduce_scatter] [--rounds 5]
//          [--target-ms 30] [--device cpu|cuda] [--sizes S1,S2,...]
//          [--ring-all-gather-min-bytes B|never] [--ring-reduce-scatter-min-bytes B|never]
//          [--ring-receive-window SEGMENTS] [--hierarchical-all-reduce true|false]
//
// --hierarchical-all-reduce false runs every all_reduce on the flat ring
// (CommOptions::hierarchical_all_reduce); with true, the default, a group
// spanning nodes evenly all-reduces in three rings. The nodes are MPI's
// shared-memory domains, as in accel-host.
//
// --ring-receive-window sets CommOptions::ring_receive_window_segments (how
// many segment receives a reducing ring step keeps posted; its scratch is
// that many segments): a large value posts a whole chunk's receives at
// once, as the rings did before the window.
//
// --sizes replaces the doubling sizes by exact ones (bytes of the full
// buffer, as S above; suffixes K/M/G), e.g. a model's unit sizes, to time
// the collectives a training step issues.
//
// --device cuda runs our NCCL backend on device memory (one GPU per rank);
// raw MPI columns are then not applicable.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "host/comm/abort.h"
#include "host/comm/mpi_session.h"
#include "host/comm/nccl_communicator.h"
#include "host/comm/process_group.h"
#include "host/util/log.h"

using namespace accel::comm;

namespace {

struct Config {
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter"};
  int rounds = 5;
  double target_ms = 30;
  bool cuda = false;
  // The MPI backend's ring thresholds (CommOptions), to compare the rings
  // with Open MPI's own algorithms; unset: the defaults.
  std::optional<size_t> ring_all_gather_min_bytes;
  std::optional<size_t> ring_reduce_scatter_min_bytes;
  std::optional<int> ring_receive_window;
  bool hierarchical_all_reduce = true;
  std::vector<size_t> sizes;  // exact sizes; empty: min_bytes doubling to max_bytes
};

size_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

std::vector<std::string> split_commas(const std::string& value) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = value.find(',', start);
    items.push_back(value.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

// The full-buffer sizes to time: --sizes, or min_bytes doubling to max_bytes.
std::vector<size_t> sizes_of(const Config& c) {
  if (!c.sizes.empty()) return c.sizes;
  std::vector<size_t> sizes;
  for (size_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= 2) sizes.push_back(bytes);
  return sizes;
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--min-bytes")
      c.min_bytes = parse_bytes(value);
    else if (flag == "--max-bytes")
      c.max_bytes = parse_bytes(value);
    else if (flag == "--rounds")
      c.rounds = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--target-ms")
      c.target_ms = std::atof(value.c_str());
    else if (flag == "--device")
      c.cuda = value == "cuda";
    else if (flag == "--ring-all-gather-min-bytes")
      c.ring_all_gather_min_bytes = value == "never" ? SIZE_MAX : parse_bytes(value);
    else if (flag == "--ring-reduce-scatter-min-bytes")
      c.ring_reduce_scatter_min_bytes = value == "never" ? SIZE_MAX : parse_bytes(value);
    else if (flag == "--hierarchical-all-reduce") {
      if (value != "true" && value != "false") {
        std::fprintf(stderr, "--hierarchical-all-reduce: '%s' is not true or false\n", value.c_str());
        std::exit(64);
      }
      c.hierarchical_all_reduce = value == "true";
    } else if (flag == "--ring-receive-window")
      c.ring_receive_window = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--sizes")
      for (const std::string& item : split_commas(value)) c.sizes.push_back(parse_bytes(item));
    else if (flag == "--ops") {
      c.ops = split_commas(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(64);
    }
  }
  return c;
}

// The slowest rank's wall time of `iters` runs of `body`, per run.
double time_per_op(MPI_Comm comm, int iters, const std::function<void()>& body) {
  MPI_Barrier(comm);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) body();
  double mine = (MPI_Wtime() - start) / iters;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

// The polling policy of Work::wait (spin 64 polls, then yield between
// polls), so the nonblocking column isolates the wrapper's own cost.
void test_until_done(MPI_Request* request) {
  for (int polls = 0, done = 0;; ++polls) {
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (polls >= 64) std::this_thread::yield();
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Host or device memory of `bytes`, filled with 1.0f.
struct Memory {
  bool cuda;
  int device;
  void* p = nullptr;
  Memory(bool on_cuda, int dev, size_t bytes) : cuda(on_cuda), device(dev) {
    std::vector<float> ones(bytes / sizeof(float), 1.0f);
    if (cuda) {
      p = cuda::alloc(device, std::max<size_t>(bytes, 4));
      cuda::copy_to_device(p, ones.data(), bytes);
    } else {
      p = std::malloc(std::max<size_t>(bytes, 4));
      std::memcpy(p, ones.data(), bytes);
    }
  }
  ~Memory() {
    if (cuda)
      cuda::free(p);
    else
      std::free(p);
  }
  Buffer view(int64_t count) const { return Buffer{p, count, DType::f32, cuda, device}; }
  float first() const {
    float v = 0;
    if (cuda)
      cuda::copy_to_host(&v, p, sizeof v);
    else
      std::memcpy(&v, p, sizeof v);
    return v;
  }
};

void bench_op(const std::string& op, const Config& config, ProcessGroup& group, int device) {
  const int n = group.size();
  const MPI_Comm raw = group.mpi().comm();
  const bool root = group.rank() == 0;
  const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
  if (root) {
    std::printf("\n### %s, %d ranks, f32 (busbw factor %.3f)\n\n", op.c_str(), n, factor);
    std::printf(
        "| size (B) | count/rank | ours us | ours algbw GB/s | ours busbw GB/s | MPI blocking us | "
        "MPI blocking busbw GB/s | overhead vs blocking | MPI nonblocking us | overhead vs nonblocking |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (const size_t bytes : sizes_of(config)) {
    // Per-rank element count: the whole buffer for all_reduce, 1/n of it otherwise.
    const int64_t total = static_cast<int64_t>(bytes / sizeof(float));
    const int64_t per_rank = op == "all_reduce" ? total : total / n;
    if (per_rank < 1) continue;
    const int64_t full = op == "all_reduce" ? per_rank : per_rank * n;
    const size_t size_bytes = static_cast<size_t>(full) * sizeof(float);
    const int64_t in_count = op == "all_gather" ? per_rank : full;
    const int64_t out_count = op == "reduce_scatter" ? per_rank : full;
    Memory in(config.cuda, device, static_cast<size_t>(in_count) * sizeof(float));
    Memory out(config.cuda, device, static_cast<size_t>(out_count) * sizeof(float));
    const Buffer bin = in.view(in_count);
    const Buffer bout = out.view(out_count);

    const std::function<void()> ours = [&] {
      Status s;
      if (op == "all_reduce")
        s = group.all_reduce(bin, bout, ReduceOp::sum);
      else if (op == "all_gather")
        s = group.all_gather(bin, bout);
      else
        s = group.reduce_scatter(bin, bout, ReduceOp::sum);
      if (!s.ok()) abort_all(s.to_string());
    };
    const std::function<void()> blocking = [&] {
      if (op == "all_reduce")
        MPI_Allreduce(in.p, out.p, static_cast<int>(in_count), MPI_FLOAT, MPI_SUM, raw);
      else if (op == "all_gather")
        MPI_Allgather(in.p, static_cast<int>(in_count), MPI_FLOAT, out.p, static_cast<int>(in_count),
                      MPI_FLOAT, raw);
      else
        MPI_Reduce_scatter_block(in.p, out.p, static_cast<int>(out_count), MPI_FLOAT, MPI_SUM, raw);
    };
    const std::function<void()> nonblocking = [&] {
      MPI_Request r;
      if (op == "all_reduce")
        MPI_Iallreduce(in.p, out.p, static_cast<int>(in_count), MPI_FLOAT, MPI_SUM, raw, &r);
      else if (op == "all_gather")
        MPI_Iallgather(in.p, static_cast<int>(in_count), MPI_FLOAT, out.p, static_cast<int>(in_count),
                       MPI_FLOAT, raw, &r);
      else
        MPI_Ireduce_scatter_block(in.p, out.p, static_cast<int>(out_count), MPI_FLOAT, MPI_SUM, raw, &r);
      test_until_done(&r);
    };

    // Warm up, check the result once, and size the rounds from the warm-up.
    const double warm = time_per_op(raw, 2, ours);
    const float want = op == "all_gather" ? 1.0f : static_cast<float>(n);
    if (out.first() != want) abort_all(op + ": wrong result " + std::to_string(out.first()));
    int iters = static_cast<int>(std::clamp(config.target_ms * 1e-3 / std::max(warm, 1e-7), 3.0, 2000.0));
    MPI_Bcast(&iters, 1, MPI_INT, 0, raw);  // every rank runs the same count
    if (!config.cuda) {
      time_per_op(raw, 2, blocking);
      time_per_op(raw, 2, nonblocking);
    }

    std::vector<double> t_ours, t_blocking, t_nonblocking;
    for (int round = 0; round < config.rounds; ++round) {
      t_ours.push_back(time_per_op(raw, iters, ours));
      if (!config.cuda) {
        t_blocking.push_back(time_per_op(raw, iters, blocking));
        t_nonblocking.push_back(time_per_op(raw, iters, nonblocking));
      }
    }
    if (!root) continue;
    const double t = median(t_ours);
    const double algbw = static_cast<double>(size_bytes) / t / 1e9;
    std::printf("| %zu | %lld | %.1f | %.3f | %.3f |", size_bytes, static_cast<long long>(per_rank), t * 1e6,
                algbw, algbw * factor);
    if (config.cuda) {
      std::printf(" n/a | n/a | n/a | n/a | n/a |\n");
    } else {
      const double tb = median(t_blocking);
      const double tn = median(t_nonblocking);
      std::printf(" %.1f | %.3f | %+.1f%% | %.1f | %+.1f%% |\n", tb * 1e6,
                  static_cast<double>(size_bytes) / tb / 1e9 * factor, (t / tb - 1) * 100, tn * 1e6,
                  (t / tn - 1) * 100);
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  accel::log::init(session.rank(), accel::log::Level::warn);
  const Config config = parse(argc, argv);
  CommOptions options;
  options.timeout_ms = 600 * 1000;
  options.flight_recorder_entries = 2000;  // as in production: its cost is part of ours
  if (config.ring_all_gather_min_bytes) {
    // Given, it is the whole policy: the ring from there up, on any group.
    options.ring_all_gather_min_bytes = *config.ring_all_gather_min_bytes;
    options.ring_all_gather_max_bytes = SIZE_MAX;
    options.ring_all_gather_max_ranks = std::numeric_limits<int>::max();
  }
  if (config.ring_reduce_scatter_min_bytes) {
    options.ring_reduce_scatter_min_bytes = *config.ring_reduce_scatter_min_bytes;
  }
  if (config.ring_receive_window) options.ring_receive_window_segments = *config.ring_receive_window;
  options.world_nodes = session.world_nodes();
  options.hierarchical_all_reduce = config.hierarchical_all_reduce;
  const std::vector<size_t> sizes = sizes_of(config);
  if (sizes.empty()) {
    if (session.rank() == 0) std::fprintf(stderr, "no sizes: --min-bytes is above --max-bytes\n");
    return 64;
  }
  std::unique_ptr<ProcessGroup> world = ProcessGroup::create_world(session, options);
  const int device = config.cuda ? session.local_rank() % std::max(1, cuda_device_count()) : 0;
  if (session.rank() == 0) {
    std::printf(
        "# accel collectives benchmark: %d ranks (%d per node), %s, sizes %zu..%zu B%s, median of %d rounds\n",
        session.world_size(), session.local_world_size(),
        config.cuda ? "NCCL on CUDA memory" : "MPI on host memory", sizes.front(),
        sizes.back(), config.sizes.empty() ? " doubling" : " as given", config.rounds);
  }
  for (const std::string& op : config.ops) {
    if (op != "all_reduce" && op != "all_gather" && op != "reduce_scatter") {
      if (session.rank() == 0) std::fprintf(stderr, "unknown op %s\n", op.c_str());
      return 64;
    }
    bench_op(op, config, *world, device);
  }
  return 0;
}
