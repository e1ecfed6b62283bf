#!/usr/bin/env bash
# Training throughput on this CPU, three contenders with identical shapes,
# batch, thread count and step (forward, backward, clip to 1.0, AdamW with
# decay 0.1 on weights only):
#   accel-host        build/bin/accel-host, per-step tokens_per_s of --metrics-file
#   plain-libtorch    bench/plain_libtorch_gpt.cpp, torch::nn + torch::optim
#   python-reference  bench/python_reference_bench.py, tests/python/gpt_reference.py
# All three time each step on its own and drop the first WARMUP steps; process
# start and model construction are outside the clock (so is data generation
# for the two baselines; accel-host's synthetic batches take microseconds). A
# contender's number for one run is its median step; the table shows the
# median over REPEATS runs, which are interleaved (contender order rotates per
# repeat) so drift in the machine's load spreads over all three.
#
# Usage: bench/throughput.sh [BUILD_DIR]      (default: build)
# Environment (defaults in brackets):
#   MODELS ["gpt-tiny gpt-small"]  REPEATS [3]  THREADS [2]
#   TINY_BATCH [8]   TINY_STEPS [30]  TINY_WARMUP [5]
#   SMALL_BATCH [1]  SMALL_STEPS [5]  SMALL_WARMUP [2]
#   PYTHON [.venv/bin/python]  OUT_DIR [a fresh temporary directory; raw results stay there]
#   ACCEL_HOST [BUILD_DIR/bin/accel-host]  PLAIN [BUILD_DIR/bin/bench_plain_libtorch_gpt]
# Needs: accel-host and bench_plain_libtorch_gpt built (ACCEL_BUILD_BENCH=ON).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$(cd "${1:-$ROOT/build}" && pwd)"
ACCEL_HOST="${ACCEL_HOST:-$BUILD_DIR/bin/accel-host}"
PLAIN="${PLAIN:-$BUILD_DIR/bin/bench_plain_libtorch_gpt}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
MODELS="${MODELS:-gpt-tiny gpt-small}"
REPEATS="${REPEATS:-3}"
THREADS="${THREADS:-2}"
OUT_DIR="${OUT_DIR:-$(mktemp -d -t accel-throughput.XXXXXX)}"
mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/results.jsonl"
: > "$RESULTS"

for f in "$ACCEL_HOST" "$PLAIN" "$PYTHON"; do
  [[ -x "$f" ]] || { echo "throughput.sh: $f not found or not executable (build with ACCEL_BUILD_BENCH=ON)" >&2; exit 2; }
done
# Every library's thread pool sized alike; each contender also sets it itself.
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"

# shape_of MODEL -> "n_layer n_head n_embd seq_len vocab_size batch steps warmup"
shape_of() {
  case "$1" in
    gpt-tiny)  echo "2 4 64 64 256 ${TINY_BATCH:-8} ${TINY_STEPS:-30} ${TINY_WARMUP:-5}" ;;
    gpt-small) echo "12 12 768 1024 50257 ${SMALL_BATCH:-1} ${SMALL_STEPS:-5} ${SMALL_WARMUP:-2}" ;;
    *) echo "throughput.sh: unknown model $1" >&2; exit 2 ;;
  esac
}

for model in $MODELS; do shape_of "$model" > /dev/null; done

# failed TAG CONTENDER: why a contender's run stopped the benchmark.
failed() {
  echo "throughput.sh: $2 failed; the end of $1.log:" >&2
  tail -n 20 "$1.log" >&2
  exit 1
}

# run_one MODEL CONTENDER REPEAT: appends one JSON line to $RESULTS.
run_one() {
  local model="$1" contender="$2" repeat="$3"
  local nl nh ne sl vs batch steps warmup
  read -r nl nh ne sl vs batch steps warmup <<< "$(shape_of "$model")"
  local shape=(--n-layer "$nl" --n-head "$nh" --n-embd "$ne" --seq-len "$sl" --vocab-size "$vs")
  local common=(--batch-size "$batch" --threads "$THREADS" --weight-decay 0.1 --grad-clip 1.0)
  local tag="$OUT_DIR/$model.$contender.$repeat"
  local json
  case "$contender" in
    accel-host)
      rm -f "$tag.metrics.jsonl"
      "$ACCEL_HOST" --model "$model" "${shape[@]}" "${common[@]}" --steps $((warmup + steps)) \
        --data synthetic --log-level warn --metrics-file "$tag.metrics.jsonl" 2> "$tag.log" ||
        failed "$tag" "$contender"
      # Its per-step tokens_per_s times train_step (batch, forward, backward,
      # norm + clip, AdamW); steps after warmup, summarised like the others.
      json="$("$PYTHON" - "$tag.metrics.jsonl" "$warmup" "$batch" "$sl" <<'EOF'
import json, statistics, sys
path, warmup, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = [json.loads(l) for l in open(path) if l.strip()]
seconds = [batch * seq / m["tokens_per_s"] for m in lines if m["step"] > warmup]
med, mean = statistics.median(seconds), statistics.fmean(seconds)
print(json.dumps({"contender": "accel-host", "statistic": "median", "tokens_per_s": batch * seq / med,
                  "ms_per_step": 1e3 * med, "mean_tokens_per_s": batch * seq / mean,
                  "timed_steps": len(seconds), "batch_size": batch, "seq_len": seq,
                  "final_loss": lines[-1]["loss"]}))
EOF
)" ;;
    plain-libtorch)
      json="$("$PLAIN" "${shape[@]}" "${common[@]}" --steps "$steps" --warmup-steps "$warmup" 2> "$tag.log")" ||
        failed "$tag" "$contender" ;;
    python-reference)
      json="$("$PYTHON" "$ROOT/bench/python_reference_bench.py" "${shape[@]}" "${common[@]}" \
                --steps "$steps" --warmup-steps "$warmup" 2> "$tag.log")" || failed "$tag" "$contender" ;;
  esac
  "$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); r.update(model=sys.argv[2], repeat=int(sys.argv[3])); print(json.dumps(r))' \
    "$json" "$model" "$repeat" >> "$RESULTS"
  echo "  $model  $contender  repeat $repeat: $(printf '%s' "$json" | "$PYTHON" -c 'import json,sys; r=json.load(sys.stdin); print("%.0f tok/s, %.1f ms/step" % (r["tokens_per_s"], r["ms_per_step"]))')" >&2
}

CONTENDERS=(accel-host plain-libtorch python-reference)
echo "throughput: models [$MODELS], $REPEATS repeats, $THREADS threads; raw results in $OUT_DIR" >&2
# Other work on the cores skews everything (with THREADS = all cores, OpenMP
# threads that wait on a descheduled peer can slow a step 10x): the load is
# printed with the table so a noisy run is recognisable.
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < REPEATS; ++r)); do
  for model in $MODELS; do
    for ((i = 0; i < ${#CONTENDERS[@]}; ++i)); do
      run_one "$model" "${CONTENDERS[$(((i + r) % ${#CONTENDERS[@]}))]}" "$r"
    done
  done
done

# The table: median over repeats (use an odd REPEATS); step time relative to
# plain LibTorch (positive: slower). For accel-host that is the framework's
# overhead.
"$PYTHON" - "$RESULTS" "$THREADS" "$MODELS" "$LOAD_BEFORE" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, os, platform, statistics, sys
import torch
path, threads, models, load_before, load_after = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5]
rows = [json.loads(l) for l in open(path) if l.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(f"CPU: {cpu} ({os.cpu_count()} cores); {threads} threads; torch {torch.__version__}; "
      f"load average {load_before} before, {load_after} after\n")
print("| model | contender | batch x seq | tokens/s (median of repeats) | range over repeats | ms/step "
      "| step time vs plain LibTorch (+: slower) |")
print("|---|---|---|---:|---:|---:|---:|")
for model in models:
    def runs(c): return [r for r in rows if r["model"] == model and r["contender"] == c]
    plain = runs("plain-libtorch")
    base = statistics.median(r["tokens_per_s"] for r in plain) if plain else None
    for c in ("accel-host", "plain-libtorch", "python-reference"):
        rs = runs(c)
        if not rs:
            continue
        tps = [r["tokens_per_s"] for r in rs]
        med = statistics.median(tps)
        batch, seq = rs[0]["batch_size"], rs[0]["seq_len"]
        rel = "baseline" if c == "plain-libtorch" else (f"{100 * (base / med - 1):+.1f}%" if base else "n/a")
        if c == "accel-host" and base:
            rel += " (overhead)"
        # ms/step of the median tokens/s, so the two columns always agree.
        print(f"| {model} | {c} | {batch} x {seq} | {med:,.0f} | {min(tps):,.0f}–{max(tps):,.0f} | "
              f"{1e3 * batch * seq / med:.1f} | {rel} |")
EOF
