"""ddp step throughput at 2 ranks with and without the collective checks (docs/benchmarks.md, "Collective checks"):
a baseline accel-host built without them (BASELINE, e.g. a build of the commit before they landed) against
CANDIDATE with the always-on per-step check, and CANDIDATE with ACCEL_COMM_VERIFY=ops. Interleaved repeats; the
median tokens/s over steps 11..N of each run, then the median over repeats.

    python3 bench/collective_checks_bench.py BASELINE CANDIDATE STEPS REPEATS [MODEL]
"""
import json, os, statistics, subprocess, sys, tempfile
baseline, candidate = sys.argv[1], sys.argv[2]
runs = {"main (no checks)": (baseline, "0"),
        "branch (per-step check)": (candidate, "0"),
        "branch, ACCEL_COMM_VERIFY=ops": (candidate, "ops")}
steps, repeats = int(sys.argv[3]), int(sys.argv[4])
model = sys.argv[5] if len(sys.argv) > 5 else "gpt-tiny"
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
results = {k: [] for k in runs}
for r in range(repeats):
    for name, (exe, verify) in runs.items():
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
            subprocess.run(["mpirun", "-n", "2", "-x", "ACCEL_COMM_VERIFY", exe, "--model", model, "--data", "synthetic",
                            "--steps", str(steps), "--batch-size", "8", "--threads", "1", "--log-level", "warn",
                            "--metrics-file", f.name], check=True, env=dict(env, ACCEL_COMM_VERIFY=verify),
                           capture_output=True)
            rows = [json.loads(l) for l in open(f.name) if l.strip()]
        results[name].append(statistics.median(row["tokens_per_s"] for row in rows[10:]))
base = statistics.median(results["main (no checks)"])
for name, values in results.items():
    m = statistics.median(values)
    print(f"| {name} | {m:.0f} | {min(values):.0f} .. {max(values):.0f} | {100.0 * (base / m - 1):+.1f}% |")
