"""How long a supervised job stops when it loses a rank (issue 34): ZeRO-3
on 4 ranks, `kill -9` of one rank at step K, the hostfile already down to
3 slots (what a health check does), `accel-host launch --max_restarts 1
--min_ranks 3` restarting the job at 3 ranks from the newest checkpoint on
disk or, with --snapshot-every, from the snapshot in memory.

    python bench/checkpoint/restart_time.py [--build build] [--kill-at 50] [--steps 60]
        [--modes disk,snapshot] [-- MODEL ARGS]

Per mode it prints: the step the restart resumed from (and so the steps
lost), the seconds from the kill to the supervisor's restart, to the
restarted ranks' "resumed" line (start-up and loading), and to the first
step completed after the restart; then checks the losses after the failure
against a run that went from 4 to 3 ranks through a checkpoint at the same
step (within 1e-5). Results: docs/benchmarks.md, "Checkpoints in the
background".
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
# Half gpt-small's width and depth with its vocabulary: 44.6 M parameters,
# 0.7 GB of fp32 weights and AdamW moments over the ranks.
MODEL = ["--model", "gpt-small", "--n-layer", "6", "--n-embd", "512", "--n-head", "8", "--seq-len", "64",
         "--data", "synthetic", "--threads", "1", "--lr", "3e-4", "--warmup-steps", "5"]
ZERO3 = ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", "3", "--batch-size", "12"]
MODES = {
    # A disk checkpoint every 25 steps, written in the background.
    "disk": ["--save-every", "25", "--save-async"],
    # A snapshot in memory every 5 steps, no disk checkpoint before the end.
    "snapshot": ["--save-every", "100000", "--snapshot-every", "5"],
}


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def rows_of(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def run_mode(mode, args, host, model, tmp):
    save, metrics, hostfile = (os.path.join(tmp, f"{mode}_{x}") for x in ("save", "m.jsonl", "hosts"))
    with open(hostfile, "w") as f:
        f.write("localhost slots=4\n")
    job = [*model, *ZERO3, "--steps", str(args.steps), "--lr-decay-steps", str(args.steps), *MODES[mode],
           "--save", save, "--metrics-file", metrics, "--log-level", "info"]
    if mode == "snapshot":
        job += ["--snapshot-dir", os.path.join("/dev/shm", f"accel-bench-{os.getpid()}")]
    supervisor = subprocess.Popen([host, "launch", "--num_processes", "4", "--hostfile", hostfile,
                                   "--max_restarts", "1", "--min_ranks", "3", "--", *job],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    lines = []
    times = {}
    resume = {}

    def read_output():
        # Timestamps the lines that matter as they arrive.
        for line in supervisor.stdout:
            now = time.monotonic()
            lines.append(line)
            if "restarting at" in line and "restart" not in times:
                times["restart"] = now
            if "resumed from" in line and "kill" in times and "resumed" not in times:
                # The restarted leg's rows are the ones after this moment
                # (a kill right after a checkpoint repeats no step).
                resume["rows_before"] = len(rows_of(metrics))
                resume["step"] = int(re.search(r"resumed from \S+ at step (\d+)", line).group(1))
                times["resumed"] = now

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()

    while not any(r["step"] >= args.kill_at for r in rows_of(metrics)):
        if supervisor.poll() is not None:
            sys.exit("".join(lines[-30:]) + f"\n{mode}: the job ended before step {args.kill_at}")
        time.sleep(0.02)
    with open(hostfile, "w") as f:
        f.write("localhost slots=3\n")
    [launcher] = children(supervisor.pid)
    os.kill(children(launcher)[-1], signal.SIGKILL)
    times["kill"] = time.monotonic()
    # The restarted job's first step is the first row written after its
    # "resumed from" line; with nothing to resume from, the first row whose
    # step does not follow the one before.
    restart_index = None
    while True:
        rows = rows_of(metrics)
        if restart_index is None:
            if "rows_before" in resume:
                restart_index = resume["rows_before"] if len(rows) > resume["rows_before"] else None
            else:
                restart_index = next((i for i in range(1, len(rows)) if rows[i]["step"] <= rows[i - 1]["step"]), None)
            if restart_index is not None:
                times["first_step"] = time.monotonic()
        if restart_index is not None and "caught_up" not in times and \
                any(r["step"] >= rows[restart_index - 1]["step"] for r in rows[restart_index:]):
            times["caught_up"] = time.monotonic()
        if supervisor.poll() is not None:
            break
        time.sleep(0.02)
    reader.join()
    if supervisor.returncode != 0 or restart_index is None:
        sys.exit("".join(lines[-40:]) + f"\n{mode}: the supervised job failed ({supervisor.returncode})")
    rows = rows_of(metrics)
    seen = restart_index
    killed_at = rows[seen - 1]["step"]
    resumed_at = resume.get("step", 0)
    # The reference: 4 ranks to the step the restart resumed from, 3 from it.
    ref_root, ref_metrics = os.path.join(tmp, f"{mode}_ref"), os.path.join(tmp, f"{mode}_ref.jsonl")
    base = [*model, *ZERO3, "--lr-decay-steps", str(args.steps), "--save", ref_root, "--metrics-file", ref_metrics,
            "--log-level", "warn"]
    if resumed_at > 0:
        subprocess.run(["mpirun", "-n", "4", host, *base, "--steps", str(resumed_at)], env=ENV, check=True,
                       capture_output=True)
    subprocess.run(["mpirun", "-n", "3", host, *base, "--steps", str(args.steps),
                    *(["--resume", ref_root] if resumed_at > 0 else [])], env=ENV, check=True, capture_output=True)
    after = {r["step"]: r["loss"] for r in rows[seen:]}
    reference = {r["step"]: r["loss"] for r in rows_of(ref_metrics) if r["step"] > resumed_at}
    worst = max(abs(after[s] - reference[s]) for s in reference)
    step_s = (rows[seen - 1]["tokens_per_s"] and 12 * 64 / rows[seen - 1]["tokens_per_s"])
    return {
        "mode": mode, "killed_after_step": killed_at, "resumed_from": resumed_at,
        "steps_lost": killed_at - resumed_at, "step_s": step_s,
        "kill_to_restart_s": times.get("restart", float("nan")) - times["kill"],
        "kill_to_resumed_s": times.get("resumed", float("nan")) - times["kill"],
        "kill_to_first_step_s": times["first_step"] - times["kill"],
        "kill_to_caught_up_s": times["caught_up"] - times["kill"],
        "worst_loss_difference": worst, "steps_compared": len(reference),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--kill-at", type=int, default=50)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--modes", default="disk,snapshot")
    parser.add_argument("model", nargs="*", help="model arguments (default: " + " ".join(MODEL) + ")")
    args = parser.parse_args()
    host = os.path.join(os.path.abspath(args.build), "bin", "accel-host")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            results.append(run_mode(mode, args, host, args.model or MODEL, tmp))
            print(json.dumps(results[-1]), file=sys.stderr)
    print("| mode | killed after step | resumed from | steps lost | step at 4 ranks (s) | kill -> restart (s) | "
          "kill -> resumed (s) | kill -> first step (s) | kill -> back at the killed step (s) | "
          "worst loss difference |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['mode']} | {r['killed_after_step']} | {r['resumed_from']} | {r['steps_lost']} | "
              f"{r['step_s']:.2f} | {r['kill_to_restart_s']:.1f} | {r['kill_to_resumed_s']:.1f} | "
              f"{r['kill_to_first_step_s']:.1f} | {r['kill_to_caught_up_s']:.1f} | "
              f"{r['worst_loss_difference']:.1e} ({r['steps_compared']} steps) |")


if __name__ == "__main__":
    main()
