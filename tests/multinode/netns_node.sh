#!/bin/sh
# netns_node.sh HOSTNAME CMD... — inside a fresh UTS namespace: sets the
# node's hostname, then runs CMD (netns_cluster.sh's nodes).
hostname "$1"
shift
exec "$@"
