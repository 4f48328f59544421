#!/usr/bin/env bash
# A real two-node SLURM cluster on loopback, on one machine, for the integration test.
#   tests/slurm/cluster.sh start DIR   -> prints `export SLURM_CONF=...` on success
#   tests/slurm/cluster.sh stop DIR
# Needs Debian's slurmctld, slurmd, slurm-client and munge packages, and root (slurmd
# runs jobs as their user and must be root to do so). Nodes n1 and n2 are two slurmd
# daemons on 127.0.0.1 with their own ports; their names go into /etc/hosts.
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?state directory}
conf="$dir/slurm.conf"

stop() {
    for f in "$dir"/slurmd.n1.pid "$dir"/slurmd.n2.pid "$dir"/slurmctld.pid; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
    done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi

for bin in slurmctld slurmd munged srun sinfo; do
    command -v "$bin" >/dev/null || { echo "missing $bin" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 3; }

mkdir -p "$dir/state" "$dir/spool"
grep -qE '^127\.0\.0\.1[[:space:]].*\bn1\b' /etc/hosts || echo "127.0.0.1 n1 n2" >> /etc/hosts

# munge: reuse the packaged key, or make one
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
if ! munge -n >/dev/null 2>&1; then
    if id munge >/dev/null 2>&1; then
        su -s /bin/sh munge -c "/usr/sbin/munged" || /usr/sbin/munged --force
    else
        /usr/sbin/munged --force
    fi
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
fi

cpus=$(nproc)
cat > "$conf" <<CONF
ClusterName=commbench
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdTimeout=30
NodeName=n1 NodeAddr=127.0.0.1 Port=17001 CPUs=$cpus State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 Port=17002 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF="$conf"
stop
slurmctld -c -i
slurmd -N n1
slurmd -N n2
for _ in $(seq 100); do
    if [ "$(sinfo -h -o '%t' 2>/dev/null | sort -u | tr -d '\n')" = "idle" ]; then
        echo "export SLURM_CONF=$conf"
        exit 0
    fi
    sleep 0.2
done
echo "cluster did not come up; sinfo:" >&2
sinfo >&2 || true
tail -5 "$dir"/slurmctld.log "$dir"/slurmd.n1.log >&2 || true
exit 1
