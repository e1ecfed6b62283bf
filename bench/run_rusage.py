"""Helper of bench/profiler_overhead.sh.

run_rusage.py OUT_DIR ACCEL_HOST ARGS...   runs accel-host once (its output
    into OUT_DIR/run.log; ARGS must hold --batch-size, --seq-len and
    --metrics-file) and prints "USER_CPU_S FASTEST_STEP_S": the process's
    user CPU seconds from wait4's rusage (microsecond resolution, unlike
    /usr/bin/time's two decimals) and its fastest step after the first five
    (batch tokens / tokens_per_s of the metrics file). Exit 1 with the end of
    the log when accel-host fails.
run_rusage.py --table RESULTS REPEATS NAME...   the markdown table of the
    results file (config index, repeat, user CPU per step s, fastest step s):
    per configuration the median and min of the user CPU per step and the
    fastest wall step of all runs, each against the first configuration.
"""
import json
import os
import statistics
import subprocess
import sys


def run(out_dir, cmd):
    log_path = os.path.join(out_dir, "run.log")
    metrics_path = cmd[cmd.index("--metrics-file") + 1]
    if os.path.exists(metrics_path):
        os.remove(metrics_path)
    with open(log_path, "w") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        with open(log_path) as log:
            tail = "".join(log.readlines()[-20:])
        sys.stderr.write(f"profiler_overhead.sh: accel-host failed ({' '.join(cmd[1:])}); the end of its log:\n{tail}")
        sys.exit(1)
    tokens = int(cmd[cmd.index("--batch-size") + 1]) * int(cmd[cmd.index("--seq-len") + 1])
    with open(metrics_path) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    fastest = min((tokens / s["tokens_per_s"] for s in steps if s["step"] > 5), default=float("nan"))
    print(f"{usage.ru_utime:.6f} {fastest:.6f}")


def table(results, repeats, names):
    cpu = {i: [] for i in range(len(names))}
    wall = {i: [] for i in range(len(names))}
    with open(results) as f:
        for line in f:
            c, _, per_step, fastest = line.split("\t")
            cpu[int(c)].append(float(per_step) * 1000.0)
            wall[int(c)].append(float(fastest) * 1000.0)

    def rel(value, base):
        return f"{100.0 * (value / base - 1.0):+.1f} %"

    b_med, b_min, b_wall = statistics.median(cpu[0]), min(cpu[0]), min(wall[0])
    print(f"| configuration | user CPU per step, median of {repeats} | min of {repeats} | fastest wall step of all runs |")
    print("|---|---|---|---|")
    for i, name in enumerate(names):
        if not cpu[i]:
            continue  # not chosen (CONFIGS)
        med, low, fast = statistics.median(cpu[i]), min(cpu[i]), min(wall[i])
        if i == 0:
            print(f"| {name} | {med:.2f} ms | {low:.2f} ms | {fast:.2f} ms |")
        else:
            print(f"| {name} | {med:.2f} ms ({rel(med, b_med)}) | {low:.2f} ms ({rel(low, b_min)}) "
                  f"| {fast:.2f} ms ({rel(fast, b_wall)}) |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--table":
        table(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    else:
        run(sys.argv[1], sys.argv[2:])
