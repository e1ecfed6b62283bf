#!/usr/bin/env bash
# The GPU benchmark: one command on a machine with an NVIDIA GPU, its driver
# and a Python with torch (the same version the build used) and nothing
# else. It prints one table: CPU-vs-CUDA parity, fp8-vs-bf16 loss, and
# tokens/s, MFU and peak device memory of accel-host (with its fused kernels
# and without, --fused-kernels false) beside PyTorch eager,
# torch.compile and transformers at gpt-small, llama-small and a wide llama
# (bf16 and fp8); the host synchronisations per step from a profiled step;
# with several GPUs, ddp / fsdp / ZeRO-3 / megatron tp on all of them.
#
# Build and pack on the build machine first:
#   make build && bench/gpu/bundle.sh          (writes .gpu-bundle/, ignored by git)
# then on the GPU machine, from a checkout holding .gpu-bundle/:
#   bench/gpu/run.sh [BUNDLE_DIR] [OUT_DIR]
# About five minutes on one H100 before the unfused runs were added (not yet
# timed with them). Every run has its own time limit; one
# that fails leaves its row saying so and the rest go on. Raw metrics, logs
# and the profile summary stay in OUT_DIR (default $OUT, else a temp dir).
# STEPS (default 25, of which 5 warm up) shortens or lengthens every run.
# QUICK=1 leaves out llama-small and the compiled and transformers gpt-small
# baselines (about half the time), for a check between full runs.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bundle=$(cd "${1:-$root/.gpu-bundle}" && pwd) || { echo "run.sh: no bundle; run bench/gpu/bundle.sh" >&2; exit 2; }
out=${2:-${OUT:-$(mktemp -d -t accel-gpu.XXXXXX)}}
mkdir -p "$out/runs"
steps=${STEPS:-25}
results=$out/results.jsonl
: >"$results"
# shellcheck source=/dev/null
. "$bundle/env.sh"
report() { python3 "$here/report.py" "$@" >>"$results"; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
accel-host --version | head -1

# accel LABEL SHAPE SECONDS ARGS...: one accel-host run, summarised.
run_accel() {
  local label=$1 shape=$2 limit=$3 file; shift 3
  file=$out/runs/${label// /_}
  local start=$SECONDS
  timeout "$limit" accel-host --data synthetic --log-every 5 --steps "$steps" --metrics-file "$file.jsonl" "$@" \
    >"$file.log" 2>&1
  local rc=$?
  echo "  $label: exit $rc, $((SECONDS - start)) s"
  [[ $rc -eq 0 ]] || tail -3 "$file.log" | sed 's/^/    /'
  report accel --label "$label" --shape "$shape" --metrics "$file.jsonl" --rc "$rc"
}
# torch LABEL SECONDS ARGS...: one torch_models.py run.
run_torch() {
  local label=$1 limit=$2 file; shift 2
  file=$out/runs/${label// /_}
  local start=$SECONDS
  timeout "$limit" python3 "$here/torch_models.py" --label "$label" --steps $((steps - 5)) "$@" >"$file.json" 2>"$file.log"
  local rc=$?
  echo "  $label: exit $rc, $((SECONDS - start)) s"
  if [[ $rc -eq 0 ]] && grep -q '^{' "$file.json"; then grep '^{' "$file.json" >>"$results"
  else tail -3 "$file.log" | sed 's/^/    /'; echo "{\"label\": \"$label\", \"error\": \"exit $rc\"}" >>"$results"; fi
}

gpt_small=(--model gpt-small --batch-size 16)
llama_small=(--model llama-small --batch-size 16)
llama_wide=(--model llama-small --n-layer 4 --n-head 16 --n-kv-head 4 --n-embd 2048 --ffn-size 8192 --batch-size 8)
bf16=(--device cuda --mixed-precision bf16)

if command -v accel_runtime_services_tests >/dev/null; then
  echo "== the CUDA paths against their CPU twins (tests/runtime/cuda_paths_test.cpp)"
  timeout 120 accel_runtime_services_tests --gtest_filter='CudaPaths*:ScaledGemm*:Fp8CastMath*:*Cuda*' >"$out/runs/cuda_tests.log" 2>&1
  echo "  exit $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/runs/cuda_tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED|Failure|error' "$out/runs/cuda_tests.log" | head -20 | sed 's/^/    /'
fi
if command -v accel_host_tests >/dev/null; then
  echo "== the host's CUDA paths (tests/host: the fused cross-entropy on a GPU)"
  timeout 120 accel_host_tests --gtest_filter='*OnAGpu*:*Cuda*' >"$out/runs/host_cuda_tests.log" 2>&1
  echo "  exit $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/runs/host_cuda_tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED|Failure|error' "$out/runs/host_cuda_tests.log" | head -20 | sed 's/^/    /'
fi

echo "== parity: gpt-tiny fp32, CPU against CUDA"
run_accel "parity cpu" gpt-tiny 120 --device cpu --model gpt-tiny --batch-size 8 --seed 7
run_accel "parity cuda" gpt-tiny 120 --device cuda --model gpt-tiny --batch-size 8 --seed 7
report parity --label "gpt-tiny fp32 CPU vs CUDA" "$out/runs/parity_cpu.jsonl" "$out/runs/parity_cuda.jsonl"

echo "== gpt-small, batch 16 x 1024"
run_accel "accel gpt-small bf16" gpt-small 120 "${bf16[@]}" "${gpt_small[@]}"
run_accel "accel gpt-small bf16 unfused" gpt-small 120 "${bf16[@]}" "${gpt_small[@]}" --fused-kernels false
run_accel "accel gpt-small fp8" gpt-small 100 "${bf16[@]}" "${gpt_small[@]}" --plugin fp8
run_torch "torch gpt-small eager" 120 --impl reference --shape gpt-small --batch-size 16 --baseline
echo "== llama-wide (4 x 2048, ffn 8192), batch 8 x 1024"
run_accel "accel llama-wide bf16" llama-wide 120 "${bf16[@]}" "${llama_wide[@]}"
run_accel "accel llama-wide bf16 unfused" llama-wide 120 "${bf16[@]}" "${llama_wide[@]}" --fused-kernels false
run_accel "accel llama-wide fp8" llama-wide 100 "${bf16[@]}" "${llama_wide[@]}" --plugin fp8
run_torch "transformers llama-wide eager" 120 --impl transformers --shape llama-wide --batch-size 8 --baseline
quick=${QUICK:-0}
if [[ $quick != 1 ]]; then
echo "== llama-small, batch 16 x 1024"
run_accel "accel llama-small bf16" llama-small 120 "${bf16[@]}" "${llama_small[@]}"
run_accel "accel llama-small bf16 unfused" llama-small 120 "${bf16[@]}" "${llama_small[@]}" --fused-kernels false
run_accel "accel llama-small fp8" llama-small 100 "${bf16[@]}" "${llama_small[@]}" --plugin fp8
run_torch "transformers llama-small eager" 120 --impl transformers --shape llama-small --batch-size 16 --baseline
echo "== moe-small (8 experts, top 2), batch 8 x 1024"
run_accel "accel moe-small bf16" moe-small 120 "${bf16[@]}" --model moe-small --batch-size 8
run_accel "accel moe-small fp8" moe-small 100 "${bf16[@]}" --model moe-small --batch-size 8 --plugin fp8
run_torch "transformers moe-small eager" 120 --impl transformers --shape moe-small --batch-size 8 --baseline
fi

echo "== fp8 and the unfused path against bf16 over 300 steps of real text (gpt-small, batch 8; the repo's sources)"
corpus=$out/corpus.txt
cat "$root"/docs/*.md "$root"/host/*/*.cpp "$root"/plugins/*/*.cpp >"$corpus"
for precision in bf16 fp8 unfused; do
  label="accel gpt-small $precision 300 steps text"
  file=$out/runs/${label// /_}
  extra=(); [[ $precision == fp8 ]] && extra=(--plugin fp8); [[ $precision == unfused ]] && extra=(--fused-kernels false)
  timeout 150 accel-host --data "text:$corpus" --steps 300 --log-every 50 --metrics-file "$file.jsonl" "${bf16[@]}" \
    --model gpt-small --batch-size 8 --seed 3 "${extra[@]}" >"$file.log" 2>&1
  echo "  $label: exit $?"
done
report curves --label "gpt-small fp8 vs bf16, 300 steps of text" "$out/runs/accel_gpt-small_bf16_300_steps_text.jsonl" \
  "$out/runs/accel_gpt-small_fp8_300_steps_text.jsonl"
report curves --label "gpt-small fused vs unfused bf16, 300 steps of text" \
  "$out/runs/accel_gpt-small_unfused_300_steps_text.jsonl" "$out/runs/accel_gpt-small_bf16_300_steps_text.jsonl"

echo "== gpt-small at batch 8: with batch 16, what each holds per sequence and beside it"
run_accel "accel gpt-small bf16 batch 8" gpt-small 90 "${bf16[@]}" --model gpt-small --batch-size 8
run_torch "torch gpt-small eager batch 8" 90 --impl reference --shape gpt-small --batch-size 8

echo "== host synchronisations: two profiled steps of gpt-small bf16 and fp8 (batch 4)"
for precision in bf16 fp8; do
  prof=$out/runs/profile_$precision
  extra=(); [[ $precision == fp8 ]] && extra=(--plugin fp8)
  timeout 60 accel-host --data synthetic --steps 5 "${bf16[@]}" --model gpt-small --batch-size 4 "${extra[@]}" \
    --plugin profiler --profiler.activities cpu,cuda --profiler.wait 2 --profiler.warmup 1 --profiler.active 2 \
    --profiler.output_trace_dir "$prof" >"$prof.log" 2>&1 || tail -3 "$prof.log"
  [[ -f $prof/profile_0.json ]] && report syncs --label "accel gpt-small $precision" "$prof/profile_0.json"
  [[ -f $prof/profile_0_summary.txt ]] && cp "$prof/profile_0_summary.txt" "$out/profile_${precision}_summary.txt"
done

if [[ $quick != 1 ]]; then
  echo "== compiled and transformers baselines"
  run_torch "torch gpt-small compiled" 150 --impl reference --shape gpt-small --batch-size 16 --compile
  run_torch "transformers gpt-small eager" 120 --impl transformers --shape gpt-small --batch-size 16
  run_torch "transformers llama-small compiled" 150 --impl transformers --shape llama-small --batch-size 16 --compile
fi

if [[ $gpus -ge 2 ]]; then
  echo "== $gpus GPUs: the strategies at gpt-small"
  for plugin in ddp fsdp "deepspeed_zero --deepspeed_zero.zero_stage 3" "megatron --megatron.tp_degree 2"; do
    # shellcheck disable=SC2086
    label="accel gpt-small bf16 x$gpus ${plugin%% *}"
    file=$out/runs/${label// /_}
    timeout 240 mpirun -n "$gpus" --bind-to none accel-host --data synthetic --steps "$steps" --log-every 5 \
      "${bf16[@]}" --model gpt-small --batch-size $((16 * gpus)) --plugin $plugin --metrics-file "$file.jsonl" \
      >"$file.log" 2>&1
    report accel --label "$label" --shape gpt-small --metrics "$file.jsonl" --rc $?
  done
fi

(cd "$out/runs" && tar czf "$out/runs.tar.gz" ./*.log ./*.jsonl ./*.json 2>/dev/null)
python3 "$here/report.py" table "$results" | tee "$out/table.md"
