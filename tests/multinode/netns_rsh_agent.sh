#!/bin/sh
# netns_rsh_agent.sh HOST COMMAND — Open MPI's plm_rsh_agent for
# netns_cluster.sh: runs COMMAND (a shell command line, as ssh would) in the
# namespace of the node whose address is HOST, under that node's hostname
# and with that node's own /dev/shm (netns_node.sh).
# ACCEL_NETNS_MAP lists "address=namespace=hostname," per node.
host=$1
shift
for entry in $(echo "$ACCEL_NETNS_MAP" | tr ',' ' '); do
  address=${entry%%=*}
  rest=${entry#*=}
  if [ "$address" = "$host" ]; then
    ns=${rest%%=*}
    exec ip netns exec "$ns" unshare --uts "$(dirname "$0")/netns_node.sh" "${rest#*=}" "/run/accel-netns/$ns" \
      /bin/sh -c "$*"
  fi
done
echo "netns_rsh_agent.sh: no node has the address $host" >&2
exit 1
