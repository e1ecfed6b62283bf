#!/usr/bin/env bash
# The profiler plugin's overhead (issue 12): the training step of accel-host
# without the plugin, with it loaded but outside the recorded steps (the
# issue's "at most 1 %"), and recording with growing detail. Two figures,
# both chosen to resist a shared, loaded machine:
#  - user CPU per step = (user CPU of a LONG-step run - user CPU of a
#    SHORT-step run) / (LONG - SHORT), from wait4's rusage (microseconds),
#    which removes start-up and model construction; other processes stretch
#    wall time far more than the effect measured here, but barely move this
#    process's own CPU time. (Recording configurations also pay, at
#    teardown, for turning every recorded step into the summary: part of
#    their cost, kept in.)
#  - the fastest wall step (min of N) of every LONG run after its first five
#    steps (batch tokens / tokens_per_s of --metrics-file): other processes
#    can only slow a step down.
# Repeats are interleaved (configuration order rotates per repeat) so drift
# in the machine's load spreads over all configurations. No threshold is
# checked: this prints figures (docs/benchmarks.md holds them).
#
# Usage: bench/profiler_overhead.sh [BUILD_DIR]          (default: build)
# Environment (defaults in brackets):
#   REPEATS [7]  SHORT [5]  LONG [65]  OUT_DIR [a fresh temporary directory]
#   ACCEL_HOST [BUILD_DIR/bin/accel-host]
#   CONFIGS ["1 2 3 4"]: which configurations (indices into NAMES below;
#           0, not loaded, is always run: the others are compared with it)
#   MODEL_ARGS ["--model gpt-tiny --n-embd 128 --seq-len 64 --vocab-size 256
#               --batch-size 4 --threads 1"]
# Needs: accel-host and the profiler plugin built. One process at a time.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$(cd "${1:-$ROOT/build}" && pwd)"
ACCEL_HOST="${ACCEL_HOST:-$BUILD_DIR/bin/accel-host}"
REPEATS="${REPEATS:-7}"
SHORT="${SHORT:-5}"
LONG="${LONG:-65}"
MODEL_ARGS="${MODEL_ARGS:---model gpt-tiny --n-embd 128 --seq-len 64 --vocab-size 256 --batch-size 4 --threads 1}"
OUT_DIR="${OUT_DIR:-$(mktemp -d -t accel-profiler-overhead.XXXXXX)}"
mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/results.tsv"
: > "$RESULTS"

[[ -x "$ACCEL_HOST" ]] || { echo "profiler_overhead.sh: $ACCEL_HOST not found or not executable" >&2; exit 2; }
(( LONG > SHORT + 5 )) || { echo "profiler_overhead.sh: LONG ($LONG) must exceed SHORT ($SHORT) + 5" >&2; exit 2; }
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

NAMES=(
  "not loaded"
  "loaded, outside the recorded steps"
  "recording, host ranges only"
  "recording, operators with shapes"
  "recording, operators, with_flops, with_stack"
)
OPTIONS=(
  ""
  "--plugin profiler --profiler.skip_first 100000"
  "--plugin profiler --profiler.activities cuda"
  "--plugin profiler --profiler.activities cpu --profiler.record_shapes true"
  "--plugin profiler --profiler.activities cpu --profiler.with_flops true --profiler.with_stack true"
)

# run STEPS OPTIONS...: runs accel-host once; prints "USER_CPU_S FASTEST_STEP_S".
run() {
  local steps="$1"; shift
  # shellcheck disable=SC2086
  python3 "$ROOT/bench/run_rusage.py" "$OUT_DIR" "$ACCEL_HOST" $MODEL_ARGS --steps "$steps" --log-level warn \
      --metrics-file "$OUT_DIR/metrics.jsonl" "$@"
}

read -r -a chosen <<< "0 ${CONFIGS:-1 2 3 4}"
chosen=($(printf '%s\n' "${chosen[@]}" | sort -un))
for c in "${chosen[@]}"; do
  [[ "$c" =~ ^[0-9]+$ && "$c" -lt ${#NAMES[@]} ]] || { echo "profiler_overhead.sh: CONFIGS: no configuration $c" >&2; exit 2; }
done
count=${#chosen[@]}
for (( r = 0; r < REPEATS; ++r )); do
  for (( k = 0; k < count; ++k )); do
    c=${chosen[$(( (k + r) % count ))]}
    # shellcheck disable=SC2206
    opts=(${OPTIONS[$c]})
    read -r short _ < <(run "$SHORT" "${opts[@]}")
    read -r long fastest < <(run "$LONG" "${opts[@]}")
    per_step=$(awk -v a="$short" -v b="$long" -v n=$(( LONG - SHORT )) 'BEGIN { printf "%.6f", (b - a) / n }')
    printf '%d\t%s\t%s\t%s\n' "$c" "$r" "$per_step" "$fastest" >> "$RESULTS"
    awk -v s="$per_step" -v f="$fastest" -v n="${NAMES[$c]}" -v r="$((r + 1))/$REPEATS" \
      'BEGIN { printf "repeat %s  %s: %.2f ms user CPU per step, fastest step %.2f ms\n", r, n, s * 1000, f * 1000 }' >&2
  done
done

python3 "$ROOT/bench/run_rusage.py" --table "$RESULTS" "$REPEATS" "${NAMES[@]}"
echo "raw results: $RESULTS" >&2
