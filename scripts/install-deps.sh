#!/usr/bin/env bash
# Installs what Accel needs on a fresh Debian 12 machine, and only what is missing.
# Idempotent and unattended: run it as often as you like (make demo/test do).
#
# - Debian packages: Open MPI, Boost, spdlog, nlohmann-json, DLPack, ccache.
# - A Python virtualenv with the pinned torch wheel (LibTorch), kept outside the
#   clone under ~/.cache/accel keyed by requirements.txt's hash, so fresh clones
#   on the same machine reuse it. The repo's .venv is a link to it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

apt_packages=(
  libopenmpi-dev openmpi-bin
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libspdlog-dev nlohmann-json3-dev libdlpack-dev
  libgtest-dev ccache python3-venv
)

missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt packages missing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The venv: one per requirements hash, built in a temp dir and renamed into place
# so an interrupted install never leaves a half-populated venv that looks done.
req_hash=$(sha256sum "$repo/requirements.txt" | cut -c1-16)
cache_root=${ACCEL_CACHE_DIR:-$HOME/.cache/accel}
venv="$cache_root/venv-$req_hash"
if [ ! -f "$venv/.accel-complete" ]; then
  echo "install-deps: creating $venv (torch wheel, several GB on first run)"
  mkdir -p "$cache_root"
  tmp="$venv.tmp.$$"
  rm -rf "$tmp"
  # The interpreter that made the venv is the one the tests' Python reference uses.
  python3 -m venv "$tmp"
  "$tmp/bin/python" -m pip install -q --upgrade pip
  "$tmp/bin/python" -m pip install -q -r "$repo/requirements.txt"
  touch "$tmp/.accel-complete"
  rm -rf "$venv"
  mv "$tmp" "$venv"
  # venv scripts embed their own path; recreate them for the final location.
  python3 -m venv --upgrade "$venv" >/dev/null
fi
ln -sfn "$venv" "$repo/.venv"
