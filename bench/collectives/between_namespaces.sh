#!/usr/bin/env bash
# The collectives benchmark between two "nodes" over TCP: two network
# namespaces on this machine (tests/multinode/netns_cluster.sh), one rank in
# each, so every byte crosses a veth pair and Open MPI's tcp BTL, and the
# benchmark compares Accel's collectives with Open MPI's own on the same
# communicator (docs/communication.md, "Across nodes").
#
#   bench/collectives/between_namespaces.sh [BUILD_DIR] [BENCH ARGS...]
#
# Default arguments: --min-bytes 1M --max-bytes 64M --rounds 7. Needs root.
# RANKS_PER_NODE=2 puts two ranks in each namespace (shared memory inside a
# node, TCP between them): the hierarchical all_reduce against the flat ring
# (--hierarchical-all-reduce false).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
shift $(($# > 0 ? 1 : 0))
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(--min-bytes 1M --max-bytes 64M --rounds 7)
cluster=$root/tests/multinode/netns_cluster.sh
name=accbench$$
subnet=10.232.$(($$ % 250 + 1))
"$cluster" up "$name" 2 "$subnet"
trap '"$cluster" down "$name" 2' EXIT
per_node=${RANKS_PER_NODE:-1}
"$cluster" mpirun "$name" 2 "$subnet" "$per_node" -- -n $((2 * per_node)) \
  "$build/bin/accel_collectives_bench" "${args[@]}"
