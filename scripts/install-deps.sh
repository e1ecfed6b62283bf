#!/usr/bin/env bash
# Installs what Accel needs on a fresh Debian 12 machine, and only what is missing.
# Idempotent and unattended: make demo / make test run it every time.
#
# - Debian packages: Open MPI, Boost, spdlog, nlohmann-json, DLPack, yaml-cpp
#   (accelerate configs), ccache,
#   and jemalloc's library (the lower-memory allocator to preload,
#   docs/benchmarks.md "Allocators"; the build does not use it).
# - A Python virtualenv with the pinned torch wheel (LibTorch), kept outside
#   the clone under ~/.cache/accel (or $ACCEL_CACHE_DIR), keyed by the hash of
#   requirements.txt, so fresh clones on the same machine reuse it. The
#   repo's .venv is a symlink to it.
# - requirements-tools.txt (tests' and docs' tools that the build never
#   sees: tensorboard, matplotlib) into the same venv, tracked by a marker
#   keyed by that file's hash: changing a tool never moves LibTorch, which
#   would make CMake rebuild everything.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

apt_packages=(
  build-essential cmake
  libopenmpi-dev openmpi-bin
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libspdlog-dev nlohmann-json3-dev libdlpack-dev zlib1g-dev libjemalloc2
  libgtest-dev ccache python3-venv libyaml-cpp-dev
  slurm-wlm iproute2 util-linux   # tests/python/test_slurm.py, test_multinode.py
)

missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  log=$(mktemp)
  if ! { $sudo_cmd apt-get update -qq && \
         DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
           -o Dpkg::Use-Pty=0 "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "install-deps: apt-get failed" >&2
    exit 1
  fi
  rm -f "$log"
fi

# The venv is complete only once its marker exists; anything else under that
# name is a leftover of an interrupted install and is rebuilt from scratch.
req_hash=$(sha256sum "$repo/requirements.txt" | cut -c1-16)
cache_root=${ACCEL_CACHE_DIR:-$HOME/.cache/accel}
venv="$cache_root/venv-$req_hash"
if [ ! -f "$venv/.accel-complete" ]; then
  echo "install-deps: creating $venv (the torch wheel is several GB the first time)"
  rm -rf "$venv"
  mkdir -p "$cache_root"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$repo/requirements.txt"
  touch "$venv/.accel-complete"
fi
tools_hash=$(sha256sum "$repo/requirements-tools.txt" | cut -c1-16)
if [ ! -f "$venv/.accel-tools-$tools_hash" ]; then
  echo "install-deps: installing the tools of requirements-tools.txt into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$repo/requirements-tools.txt"
  rm -f "$venv"/.accel-tools-*
  touch "$venv/.accel-tools-$tools_hash"
fi
ln -sfn "$venv" "$repo/.venv"
