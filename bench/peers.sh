#!/usr/bin/env bash
# Side-by-side peer benchmark: accel-host ddp and fsdp against PyTorch eager
# DDP and FSDP2 (fully_shard per block) under torchrun, same GPT-2 shape,
# global batch, threads and AdamW settings, repeats interleaved. Prints a
# Markdown table of tokens/s, peak resident memory per rank and start-up
# time (bench/peers.py has the method). Every option of bench/peers.py
# passes through, e.g.
#
#   bash bench/peers.sh --ranks 2 --n-layer 4 --seq-len 512 --batch-size 4 --steps 8 --repeats 3
#
# Needs a built tree (make build) and the venv's torch (torchrun).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
exec "$PYTHON" "$ROOT/bench/peers.py" --python "$PYTHON" "$@"
