#!/bin/sh
# netns_node.sh HOSTNAME SHM CMD... — inside a node of netns_cluster.sh (a
# network namespace entered by `ip netns exec`, which also gives it a mount
# namespace of its own) and a fresh UTS namespace: sets the node's hostname,
# puts the node's own memory directory SHM on /dev/shm, then runs CMD.
hostname "$1"
mount --bind "$2" /dev/shm
shift 2
exec "$@"
