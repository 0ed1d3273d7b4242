#!/usr/bin/env bash
# Starts a single-node SLURM cluster on this machine, for the SLURM tests (CI runs it as root):
# munged, slurmctld and slurmd on loopback, state and logs under DIR (default /tmp/ffn-slurm), the
# configuration in /etc/slurm/slurm.conf (where srun, sbatch and squeue look). Needs root and
# Debian's slurmd, slurmctld, slurm-client and munge (scripts/install-deps.sh installs them).
#
#   bash scripts/slurm-up.sh [DIR]
set -euo pipefail
dir=${1:-/tmp/ffn-slurm}
mkdir -p "$dir/state" "$dir/spool"
cpus=$(nproc)
mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p /etc/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=ffn-ci
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
# munge: its key is made by the package; the daemon runs as the munge user.
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged
fi
pgrep -x slurmctld >/dev/null || slurmctld -i
pgrep -x slurmd >/dev/null || slurmd -N localhost
for _ in $(seq 1 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "slurm-up: node localhost is up (logs in $dir)"
    exit 0
  fi
  sleep 1
done
echo "slurm-up: the node did not come up within 60 s; logs in $dir:" >&2
tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
exit 1
