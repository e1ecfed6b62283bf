#!/usr/bin/env bash
# slurm_cluster.sh — a real Slurm (Debian's slurm-wlm: slurmctld and slurmd)
# on this machine, for the Slurm tests; everything it writes lives in DIR.
#
#   slurm_cluster.sh up DIR [CPUS]   writes DIR/slurm.conf, starts both
#                                    daemons, waits until the node is idle
#   slurm_cluster.sh down DIR        stops them
#
# Clients then need SLURM_CONF=DIR/slurm.conf. One node named localhost
# with CPUS cpus (default 4, accepted beyond the machine's own with
# config_overrides: the tests oversubscribe as mpirun does), no munge
# (auth/none), no cgroups (proctrack/linuxproc), ports picked free.
set -euo pipefail
cmd=$1 dir=$(mkdir -p "$2" && cd "$2" && pwd)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

stop() {
  local daemon pid
  for daemon in slurmd slurmctld; do
    pid=$(cat "$dir/$daemon.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$dir/$daemon.pid"
  done
}

case $cmd in
  up)
    cpus=${3:-4}
    command -v slurmctld >/dev/null || { echo "slurm_cluster.sh: slurmctld not found (apt-get install slurm-wlm)" >&2; exit 2; }
    stop
    mkdir -p "$dir/state" "$dir/spool"
    cat >"$dir/slurm.conf" <<CONF
ClusterName=accel-test
SlurmctldHost=localhost(127.0.0.1)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobRequeue=1
NodeName=localhost CPUs=$cpus State=UNKNOWN NodeAddr=127.0.0.1
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -f "$SLURM_CONF" -i
    slurmd -f "$SLURM_CONF" -N localhost
    for _ in $(seq 100); do
      [[ $(sinfo -h -o %T 2>/dev/null) == idle ]] && exit 0
      sleep 0.2
    done
    echo "slurm_cluster.sh: the node did not become idle; logs in $dir" >&2
    exit 1
    ;;
  down) stop ;;
  *) echo "slurm_cluster.sh: unknown command $cmd" >&2; exit 2 ;;
esac
