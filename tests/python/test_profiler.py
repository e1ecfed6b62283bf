"""The profiler plugin end to end: every trace it writes is Chrome Trace Event
Format (checked field by field, ranges matched, timestamps monotonic per
track); the host's ranges of a step account for the step; a schedule records
exactly the steps torch.profiler.schedule records; the merged trace of two
ranks is clock-aligned, joins each collective's parts and names the rank the
others waited for; FLOPs follow the model's shapes; bad options are one line,
exit 2. Runs are tiny; no assertion depends on how fast anything runs."""
import glob
import json
import os
import unittest
from collections import defaultdict

from accel_testing import MPIRUN, TempDirMixin, mpirun, run_host

try:
    import torch.profiler as torch_profiler
except ImportError:  # the oracle for the schedule test
    torch_profiler = None

# A shape whose step (a few hundred ms) is dominated by the units' work, so
# the few microseconds between the host's ranges stay far below 5 % of it
# even when the scheduler preempts the process there; still quick.
SHAPE = ["--model", "gpt-tiny", "--n-embd", 256, "--seq-len", 64, "--vocab-size", 256, "--batch-size", 4,
         "--log-level", "warn", "--threads", 1]
N_LAYER, N_EMBD, SEQ, VOCAB, BATCH = 2, 256, 64, 256, 4


def profiler(*args):
    return ["--plugin", "profiler", *args]


def read(path):
    with open(path) as f:
        return f.read()


# ------------------------------------------------------------------ checks --

def load_trace(test, path):
    """Loads a trace and checks it is Chrome Trace Event Format; returns it."""
    with open(path) as f:
        trace = json.load(f)
    test.assertIsInstance(trace, dict)
    events = trace["traceEvents"]
    test.assertIsInstance(events, list)
    test.assertGreater(len(events), 0, path)
    last_ts = {}
    open_ranges = defaultdict(list)
    for e in events:
        ph = e.get("ph")
        test.assertIn(ph, {"X", "B", "E", "i", "C", "M", "s", "f"}, e)
        test.assertIsInstance(e.get("pid"), int, e)
        test.assertIsInstance(e.get("tid"), int, e)
        test.assertIsInstance(e.get("name"), str, e)
        if ph == "M":
            continue
        test.assertIsInstance(e.get("ts"), (int, float), e)
        if ph == "X":
            test.assertIsInstance(e.get("dur"), (int, float), e)
            test.assertGreaterEqual(e["dur"], 0, e)
        if ph in ("s", "f"):
            test.assertIn("id", e)
            continue  # flow ends are bound to slices, not ordered on a track
        track = (e["pid"], e["tid"])
        test.assertGreaterEqual(e["ts"], last_ts.get(track, float("-inf")), f"timestamps go back on {track}: {e}")
        last_ts[track] = e["ts"]
        if ph == "B":
            open_ranges[track].append(e["name"])
        elif ph == "E":
            test.assertTrue(open_ranges[track], f"E without B: {e}")
            test.assertEqual(open_ranges[track].pop(), e["name"])
    for track, names in open_ranges.items():
        test.assertEqual(names, [], f"B without E on {track}")
    # Complete events nest strictly on each track (what Perfetto requires).
    stacks = defaultdict(list)
    for e in (e for e in events if e["ph"] == "X"):
        stack = stacks[(e["pid"], e["tid"])]
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        end = e["ts"] + e["dur"]
        test.assertTrue(not stack or end <= stack[-1] + 0.002, f"{e} overlaps its parent without nesting")
        stack.append(end)
    return trace


def slices(trace, **match):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and all(e.get(k) == v for k, v in match.items())]


def children_of(trace, parent):
    """The ranges directly inside `parent` on its track."""
    inside = [e for e in slices(trace) if e["pid"] == parent["pid"] and e["tid"] == parent["tid"] and e is not parent
              and e["ts"] >= parent["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 0.002]
    direct = []
    for e in sorted(inside, key=lambda e: (e["ts"], -e["dur"])):
        if direct and e["ts"] < direct[-1]["ts"] + direct[-1]["dur"]:
            continue  # nested in an earlier child
        direct.append(e)
    return direct


class ProfilerTraces(TempDirMixin, unittest.TestCase):
    def test_single_rank_trace_is_valid_and_accounts_for_each_step(self):
        out = self.path("traces")
        run_host(*SHAPE, "--steps", 3, "--save", self.path("ckpt"),
                 *profiler("--profiler.output_trace_dir", out, "--profiler.record_shapes", "true",
                           "--profiler.with_stack", "true", "--profiler.with_modules", "true",
                           "--profiler.profile_memory", "true"))
        self.assertTrue(os.path.exists(os.path.join(out, "profile_0.json")))
        self.assertTrue(os.path.exists(os.path.join(out, "profile_merged.json")))
        self.assertTrue(os.path.exists(os.path.join(out, "profile_0_summary.txt")))
        for path in glob.glob(os.path.join(out, "*.json")):
            load_trace(self, path)
        trace = load_trace(self, os.path.join(out, "profile_0.json"))
        steps = slices(trace, name="step", cat="host")
        self.assertEqual(sorted(s["args"]["step"] for s in steps), [0, 1, 2])
        for step in steps:
            kids = children_of(trace, step)
            covered = sum(k["dur"] for k in kids)
            # Structural: the host names everything a step does, so what is
            # left between its ranges is bookkeeping (a few microseconds).
            self.assertGreater(covered, 0.95 * step["dur"], [(k["name"], k["dur"]) for k in kids])
            names = {k["name"] for k in kids}
            self.assertTrue({"zero_grad", "data", "forward", "loss", "backward", "optimizer_step"} <= names, names)
            units = [k for k in kids if k["name"] in ("forward", "backward")]
            self.assertEqual(sorted((k["name"], k["args"]["unit"]) for k in units),
                             sorted((n, u) for n in ("forward", "backward") for u in range(N_LAYER + 2)))
            for k in units:  # with_modules: the unit's name as the module
                self.assertTrue(k["args"]["module"].startswith("gpt."), k)
        # Operators inside units, with shapes (record_shapes) and their call
        # path (with_stack): step > forward > aten::linear ...
        linears = slices(trace, name="aten::linear")
        self.assertTrue(linears)
        self.assertIn("Input Dims", linears[0]["args"])
        self.assertTrue(linears[0]["args"]["stack"].startswith("step > forward > aten::linear"), linears[0]["args"])
        # The run's final checkpoint, with the plugins' part inside it.
        save = slices(trace, name="checkpoint.save", cat="checkpoint")
        self.assertEqual(len(save), 1)
        self.assertEqual([k["name"] for k in children_of(trace, save[0]) if k["cat"] == "checkpoint"],
                         ["checkpoint.plugin_state"])
        # profile_memory: a counter track per memory category.
        counters = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
        self.assertTrue({"memory.params", "memory.grads", "memory.all"} <= counters, counters)
        summary = read(os.path.join(out, "profile_0_summary.txt"))
        self.assertIn("Self total", summary)
        self.assertIn("aten::", summary)

    def test_without_shapes_operators_carry_no_shapes(self):
        out = self.path("plain")
        run_host(*SHAPE, "--steps", 1, *profiler("--profiler.output_trace_dir", out))
        trace = load_trace(self, os.path.join(out, "profile_0.json"))
        linears = slices(trace, name="aten::linear")
        self.assertTrue(linears)
        self.assertNotIn("Input Dims", linears[0]["args"])
        self.assertNotIn("stack", linears[0]["args"])
        # activities cuda only: no LibTorch CPU operators, the host's ranges stay.
        out = self.path("cuda_only")
        run_host(*SHAPE, "--steps", 1, *profiler("--profiler.output_trace_dir", out, "--profiler.activities", "cuda"))
        trace = load_trace(self, os.path.join(out, "profile_0.json"))
        self.assertEqual(slices(trace, cat="operator"), [])
        self.assertTrue(slices(trace, name="step"))

    @unittest.skipIf(torch_profiler is None, "torch not importable")
    def test_schedule_records_exactly_torch_profilers_active_steps(self):
        for wait, warmup, active, repeat, skip_first, steps in [(1, 1, 2, 2, 1, 11), (0, 0, 1, 0, 2, 5),
                                                                 (2, 0, 1, 1, 0, 6)]:
            with self.subTest(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first):
                out = self.path(f"sched_{wait}{warmup}{active}{repeat}{skip_first}")
                run_host("--model", "gpt-tiny", "--batch-size", 2, "--log-level", "warn", "--steps", steps,
                         *profiler("--profiler.output_trace_dir", out, "--profiler.activities", "cuda",
                                   "--profiler.wait", wait, "--profiler.warmup", warmup, "--profiler.active", active,
                                   "--profiler.repeat", repeat, "--profiler.skip_first", skip_first))
                schedule = torch_profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                                                   skip_first=skip_first)
                recording = {torch_profiler.ProfilerAction.RECORD, torch_profiler.ProfilerAction.RECORD_AND_SAVE}
                expected = [k for k in range(steps) if schedule(k) in recording]
                trace = load_trace(self, os.path.join(out, "profile_0.json"))
                self.assertEqual(sorted(s["args"]["step"] for s in slices(trace, name="step")), expected)
                # Nothing of another step leaks in (warmup's events are discarded).
                self.assertEqual({e["args"]["step"] for e in slices(trace)}, set(expected))

    def test_flops_follow_the_model_shape(self):
        out = self.path("flops")
        run_host(*SHAPE, "--steps", 1, *profiler("--profiler.output_trace_dir", out, "--profiler.with_flops", "true",
                                                 "--profiler.peak_tflops", 1.0))
        trace = load_trace(self, os.path.join(out, "profile_0.json"))
        tokens = BATCH * SEQ
        d, t = N_EMBD, SEQ
        # Forward: the blocks' four linears (12 d^2 weights) and the tied head
        # (d x vocab), 2 FLOPs per weight and token; attention 4 T^2 d per
        # sequence and layer. Backward: twice the forward.
        forward = 2 * tokens * (12 * d * d * N_LAYER + d * VOCAB) + 4 * BATCH * t * t * d * N_LAYER
        summary = read(os.path.join(out, "profile_0_summary.txt"))
        row = [l for l in summary.splitlines() if l.strip().startswith("0 ")]
        self.assertEqual(len(row), 1, summary)
        gflops = float(row[0].split()[2])
        self.assertAlmostEqual(gflops * 1e9 / (3 * forward), 1.0, delta=0.02, msg=summary)
        self.assertIn("%", row[0])  # MFU against --profiler.peak_tflops
        self.assertTrue(any("flops" in e["args"] for e in slices(trace, name="aten::linear")))


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MergedTrace(TempDirMixin, unittest.TestCase):
    SLEEP_MS = 200

    def test_two_ranks_merged_aligned_and_the_straggler_named(self):
        out = self.path("merged")
        mpirun(2, *SHAPE, "--steps", 4, *profiler("--profiler.output_trace_dir", out, "--profiler.activities", "cuda",
                                                  "--profiler.skip_first", 1, "--profiler.active", 3,
                                                  "--profiler.test_straggler_rank", 1,
                                                  "--profiler.test_straggler_ms", self.SLEEP_MS))
        for rank in (0, 1):
            load_trace(self, os.path.join(out, f"profile_{rank}.json"))
        merged = load_trace(self, os.path.join(out, "profile_merged.json"))
        self.assertEqual({e["pid"] for e in merged["traceEvents"]}, {0, 1})
        alignment = merged["otherData"]["clock_alignment"]
        error_us = {int(r): a["error_us"] for r, a in alignment.items()}
        self.assertEqual(set(error_us), {0, 1})
        self.assertGreater(error_us[1], 0)

        comm = [e for e in slices(merged, cat="comm") if "seq" in e["args"] or "label" in e["args"]]
        by_key = defaultdict(dict)
        occurrence = defaultdict(int)
        for e in sorted(comm, key=lambda e: e["ts"]):
            a = e["args"]
            if "seq" in a:
                key = (e["name"], a["seq"], a["group_ranks"])
            else:
                k = (e["name"], a["label"], a["step"], e["pid"])
                key = (e["name"], a["label"], a["step"], occurrence[k])
                occurrence[k] += 1
            by_key[key][e["pid"]] = e
        joined = {k: v for k, v in by_key.items() if len(v) == 2}
        self.assertTrue(joined)
        # Synchronous collectives: no rank leaves before the last arrives, so
        # after alignment the two parts overlap within the recorded error.
        sync = [v for v in joined.values() if "async" not in v[0]["args"] and v[0]["name"] != "wait"]
        self.assertTrue(sync)
        slack = error_us[0] + error_us[1]
        for parts in sync:
            latest_begin = max(p["ts"] for p in parts.values())
            earliest_end = min(p["ts"] + p["dur"] for p in parts.values())
            self.assertLessEqual(latest_begin, earliest_end + slack, parts)
        # The sleeping rank arrives last wherever the ranks' arrivals differ
        # by half the sleep or more, and that happens in every recorded step.
        late = [v for v in joined.values() if abs(v[0]["ts"] - v[1]["ts"]) >= self.SLEEP_MS * 1000 / 2]
        self.assertTrue(late)
        for parts in late:
            self.assertEqual(max(parts, key=lambda r: parts[r]["ts"]), 1, parts)
        self.assertEqual({v[0]["args"]["step"] for v in late}, {1, 2, 3})
        # Every plugin hook is a range under the plugin's name.
        self.assertTrue(slices(merged, name="gradients_finalize", cat="ddp"))
        self.assertTrue(slices(merged, name="step_begin", cat="profiler"))
        arrived_last = merged["otherData"]["collectives_arrived_last"]
        self.assertGreater(arrived_last.get("1", 0), 0)
        # Flow arrows join the parts: each starts on the last arrival (rank 1).
        starts = [e for e in merged["traceEvents"] if e["ph"] == "s"]
        finishes = {e["id"]: e for e in merged["traceEvents"] if e["ph"] == "f"}
        self.assertTrue(starts)
        for s in starts:
            self.assertIn(s["id"], finishes)
            self.assertNotEqual(s["pid"], finishes[s["id"]]["pid"])


class ProfilerOptions(TempDirMixin, unittest.TestCase):
    def refused(self, *args, words):
        proc = run_host("--model", "gpt-tiny", "--steps", 1, "--batch-size", 2, "--log-level", "warn",
                        *profiler(*args), check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, proc.stderr)
        for word in words:
            self.assertIn(word, lines[0])

    def test_unknown_activity(self):
        self.refused("--profiler.activities", "cpu,gpu", words=["activities", "'gpu'", "cpu, cuda"])

    def test_negative_schedule_fields(self):
        for field in ("wait", "warmup", "repeat", "skip_first"):
            with self.subTest(field=field):
                self.refused(f"--profiler.{field}", -1, words=[f"profiler.{field}", "minimum"])
        self.refused("--profiler.active", 0, words=["profiler.active", "minimum"])

    def test_a_schedule_cycle_past_int64_is_refused(self):
        # Regression (issue 30): wait + warmup + active wrapped to 0 and the
        # first step's `step % 0` killed accel-host with SIGFPE.
        big = 9223372036854775807
        self.refused("--profiler.wait", big, "--profiler.warmup", big, words=["profiler.wait", "maximum"])
        self.refused("--profiler.skip_first", big, words=["profiler.skip_first", "maximum"])

    def test_unwritable_output_trace_dir(self):
        blocker = self.path("a_file")
        open(blocker, "w").close()
        self.refused("--profiler.output_trace_dir", os.path.join(blocker, "traces"),
                     words=["output_trace_dir", "not writable"])


if __name__ == "__main__":
    unittest.main()
