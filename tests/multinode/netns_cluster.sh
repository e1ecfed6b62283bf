#!/usr/bin/env bash
# netns_cluster.sh — "nodes" on one machine, each a network namespace with
# its own address and hostname, for testing Accel across nodes over TCP.
#
#   netns_cluster.sh up NAME NODES SUBNET    e.g. up t42 2 10.231.42
#   netns_cluster.sh down NAME NODES
#   netns_cluster.sh mpirun NAME NODES SUBNET SLOTS -- MPIRUN_ARGS...
#
# up: namespaces NAME-node0..N-1 joined by a bridge (NAME-br) in a namespace
# of its own (NAME-sw, the switch), node i at SUBNET.(i+1)/24 on a veth.
# Nothing is added to the machine's own network namespace.
# Each node also has memory of its own: /dev/shm inside node i is
# SHM_ROOT/NAME-nodei (SHM_ROOT=/run/accel-netns, outside /dev/shm so
# that every node can still name it), bind-mounted by
# netns_node.sh, so what one node keeps in /dev/shm (Open MPI's segments,
# Accel's snapshots) the others do not see, and a test can wipe one node's
# memory as a lost node would.
# mpirun: runs mpirun inside node 0 (with hostname node0) over a hostfile of
# the nodes' addresses, SLOTS ranks each; Open MPI reaches node i through
# netns_rsh_agent.sh, which enters its namespace and sets hostname nodei, so
# Open MPI sees distinct nodes: ranks on different nodes talk TCP (its tcp
# BTL, pinned to the subnet), ranks of one node shared memory.
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN), iproute2 and unshare.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cmd=$1 name=$2 nodes=$3
shm_root=/run/accel-netns

down() {
  for ((i = 0; i < nodes; i++)); do
    ip netns del "$name-node$i" 2>/dev/null || true
    rm -rf "${shm_root:?}/$name-node$i"
  done
  ip netns del "$name-sw" 2>/dev/null || true
}

case $cmd in
  up)
    subnet=$4
    down
    ip netns add "$name-sw"
    ip -n "$name-sw" link add "br0" type bridge
    ip -n "$name-sw" link set br0 up
    for ((i = 0; i < nodes; i++)); do
      ns=$name-node$i
      ip netns add "$ns"
      mkdir -p "$shm_root/$ns"
      ip -n "$ns" link set lo up
      # The veth pair is made inside the node's namespace and one end moved
      # to the switch: no interface name ever exists in the root namespace.
      ip -n "$ns" link add eth0 type veth peer name "port$i"
      ip -n "$ns" link set "port$i" netns "$name-sw"
      ip -n "$name-sw" link set "port$i" master br0 up
      ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
      ip -n "$ns" link set eth0 up
    done
    ;;
  down) down ;;
  mpirun)
    subnet=$4 slots=$5
    shift 5
    [[ ${1:-} == -- ]] && shift
    hostfile=$(mktemp)
    map=
    for ((i = 0; i < nodes; i++)); do
      echo "$subnet.$((i + 1)) slots=$slots" >>"$hostfile"
      map+="$subnet.$((i + 1))=$name-node$i=node$i,"
    done
    export ACCEL_NETNS_MAP=$map OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    set +e
    ip netns exec "$name-node0" unshare --uts "$here/netns_node.sh" node0 "$shm_root/$name-node0" \
      mpirun --hostfile "$hostfile" --mca plm_rsh_agent "$here/netns_rsh_agent.sh" \
      --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" "$@"
    rc=$?
    rm -f "$hostfile"
    exit $rc
    ;;
  *) echo "netns_cluster.sh: unknown command $cmd" >&2; exit 2 ;;
esac
