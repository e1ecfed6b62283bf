"""What the configurable decoder costs (docs/benchmarks.md, "The configurable decoder"): two accel-host
binaries, BASELINE (a build from before the change, e.g. 43e5b91) and CANDIDATE, side by side.

1. Bits: every preset both binaries know trains 4 steps from the same seed and saves; the model and optimizer
   files must be byte-identical (the presets' checkpoints unchanged bit for bit).
2. Speed: gpt-small and llama-small tokens/s on the CPU (fp32, batch 1, --threads THREADS, synthetic data),
   the median step over steps WARMUP+1..STEPS of each run, then the median over REPEATS interleaved repeats
   (the binary order alternates per repeat, so drift in the machine's load spreads over both).

    python3 bench/decoder_cost.py BASELINE CANDIDATE [REPEATS=3] [STEPS=6] [WARMUP=2] [THREADS=2]

Prints two markdown tables. Exit 1 when any preset's files differ.
"""
import filecmp
import json
import os
import statistics
import subprocess
import sys
import tempfile

# The presets that existed before the configurable decoder.
BIT_PRESETS = ["gpt-tiny", "gpt-small", "llama-tiny", "llama-small", "moe-tiny", "moe-small"]
SPEED_MODELS = [("gpt-small", 1024), ("llama-small", 1024)]


def run(exe, *args):
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True)


def compare_bits(baseline, candidate, scratch):
    rows, same = [], True
    for preset in BIT_PRESETS:
        dirs = []
        for tag, exe in (("baseline", baseline), ("candidate", candidate)):
            out = os.path.join(scratch, f"{tag}-{preset}")
            proc = run(exe, "--model", preset, "--steps", 4, "--batch-size", 4, "--seq-len", 32, "--save", out,
                       "--log-level", "warn", "--threads", 1)
            if proc.returncode != 0:
                sys.exit(f"{exe} --model {preset}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
            dirs.append(os.path.join(out, "step_4"))
        files = sorted(f for f in os.listdir(dirs[0]) if f.endswith(".safetensors"))
        equal = [filecmp.cmp(os.path.join(dirs[0], f), os.path.join(dirs[1], f), shallow=False) for f in files]
        same = same and all(equal) and bool(files)
        rows.append(f"| {preset} | {', '.join(files)} | {'identical' if all(equal) else 'DIFFER'} |")
    return rows, same


def tokens_per_s(exe, model, seq, steps, warmup, threads):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as metrics:
        proc = run(exe, "--model", model, "--data", "synthetic", "--steps", steps, "--batch-size", 1,
                   "--seq-len", seq, "--threads", threads, "--log-level", "warn", "--metrics-file", metrics.name)
        if proc.returncode != 0:
            sys.exit(f"{exe} --model {model}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        rows = [json.loads(line) for line in open(metrics.name) if line.strip()]
    return statistics.median(row["tokens_per_s"] for row in rows[warmup:])


def main():
    baseline, candidate = sys.argv[1], sys.argv[2]
    given = [int(a) for a in sys.argv[3:7]]
    repeats, steps, warmup, threads = given + [3, 6, 2, 2][len(given):]
    with tempfile.TemporaryDirectory() as scratch:
        bit_rows, same = compare_bits(baseline, candidate, scratch)
    print("| preset | files after 4 steps | baseline vs candidate |\n|---|---|---|")
    print("\n".join(bit_rows))
    results = {(m, tag): [] for m, _ in SPEED_MODELS for tag in ("baseline", "candidate")}
    for r in range(repeats):
        order = [("baseline", baseline), ("candidate", candidate)]
        for model, seq in SPEED_MODELS:
            for tag, exe in order if r % 2 == 0 else order[::-1]:
                results[(model, tag)].append(tokens_per_s(exe, model, seq, steps, warmup, threads))
    print("\n| model | baseline tokens/s | candidate tokens/s | ranges (baseline; candidate) | candidate step time vs "
          "baseline (+: slower) |\n|---|---|---|---|---|")
    for model, _ in SPEED_MODELS:
        b, c = results[(model, "baseline")], results[(model, "candidate")]
        mb, mc = statistics.median(b), statistics.median(c)
        print(f"| {model} | {mb:.0f} | {mc:.0f} | {min(b):.0f}..{max(b):.0f}; {min(c):.0f}..{max(c):.0f} | "
              f"{100.0 * (mb / mc - 1):+.1f}% |")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
