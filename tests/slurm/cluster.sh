#!/usr/bin/env bash
# A real two-node SLURM cluster on loopback, on one machine, for the integration test.
#   tests/slurm/cluster.sh start DIR [FIRST_JOB_ID]  -> prints `export SLURM_CONF=...` once
#                                                        every daemon is verified up
#   tests/slurm/cluster.sh stop DIR                   -> stops what `start DIR` started, puts
#                                                        /etc/hosts back; safe to repeat
# Needs Debian's slurmctld, slurmd, slurm-client and munge packages, and root (slurmd runs
# jobs as their user and must be root to do so).
#
# The machine may already run a SLURM cluster (or another copy of this test), so nothing here
# is shared with one: the cluster has its own name, node names, free ports, state and spool
# directories, and its own munged with its own key and socket (a cluster already running is
# free to use the system munged and its key). A daemon counts as up only when its own pid
# listens on its own port: on a busy port slurmd dies, and a stranger's slurmd on that port
# would otherwise answer our slurmctld's pings (the cluster looked idle, and srun then failed);
# a port taken between choice and bind costs one more attempt with other ports. Stopping touches only the processes this
# cluster started (pid files checked against their command line, then anything carrying this
# cluster's mark in its environment), and /etc/hosts gets back exactly what it held before.
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?state directory}
first_job_id=${3:-1}
[ "$cmd" = start ] && mkdir -p "$dir"
[ -d "$dir" ] || exit 0  # stop: nothing was started there
dir=$(cd "$dir" && pwd)
conf="$dir/slurm.conf"
vars="$dir/cluster.vars"      # what `stop` needs to find this cluster's pieces again
mark="COMMBENCH_TEST_SLURM=$dir" # in the environment of every process this cluster starts

alive() {  # a zombie has exited already: it only waits for its parent to collect it
    local state
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# Stop the process in pid file $1 if its command line contains $2 (so a stale pid file whose
# pid now belongs to someone else's process never gets that process killed).
stop_pidfile() {
    local pid
    [ -f "$1" ] || return 0
    pid=$(cat "$1" 2>/dev/null) || return 0
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    if alive "$pid" && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$2"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$1"
}

# Whatever is left that this cluster started: slurmstepd and job processes carry its mark.
stop_marked() {
    local p pid
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" = $$ ] && continue
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF -- "$mark" || continue
        kill -KILL "$pid" 2>/dev/null || true
    done
}

stop_slurm() {
    stop_pidfile "$dir/slurmd.$node1.pid" "$conf"
    stop_pidfile "$dir/slurmd.$node2.pid" "$conf"
    stop_pidfile "$dir/slurmctld.pid" "$conf"
}

# /etc/hosts is edited in place under a lock on it (it can be a bind mount, and other copies
# of this script edit it too): append one tagged line; on stop, cut the file back to its old
# length when nobody changed it since (exactly what it held, in one step, so a reader never
# sees it half written), else take out our line only.
hosts_add() {
    local size
    exec 9</etc/hosts
    flock 9
    size=$(stat -c %s /etc/hosts)
    if [ "$size" -gt 0 ] && [ -n "$(tail -c 1 /etc/hosts)" ]; then
        printf '\n%s\n' "$hosts_line" >"$dir/hosts.added"  # the last line had no newline
    else
        printf '%s\n' "$hosts_line" >"$dir/hosts.added"
    fi
    head -c "$size" /etc/hosts >"$dir/hosts.before"
    cat "$dir/hosts.added" >>/etc/hosts
    exec 9<&-
}

hosts_restore() {
    local size
    [ -f "$dir/hosts.before" ] || return 0
    exec 9</etc/hosts
    flock 9
    size=$(stat -c %s "$dir/hosts.before")
    if cat "$dir/hosts.before" "$dir/hosts.added" | cmp -s - /etc/hosts; then
        truncate -s "$size" /etc/hosts
    elif grep -qxF -- "$hosts_line" /etc/hosts; then
        grep -vxF -- "$hosts_line" /etc/hosts >"$dir/hosts.now" || true
        cat "$dir/hosts.now" >/etc/hosts
        rm -f "$dir/hosts.now"
    fi
    exec 9<&-
    rm -f "$dir/hosts.before" "$dir/hosts.added"
}

stop() {
    [ -f "$vars" ] || return 0
    # shellcheck disable=SC1090
    . "$vars"
    stop_slurm
    stop_pidfile "$munge_dir/munged.pid" "$munge_dir/"
    stop_marked
    hosts_restore
    rm -rf "$munge_dir"
    rm -f "$vars"
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR [FIRST_JOB_ID]" >&2; exit 2; }

for bin in slurmctld slurmd munged munge unmunge srun sinfo scontrol ss flock; do
    command -v "$bin" >/dev/null || { echo "missing $bin" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 3; }

stop  # a previous start in the same DIR
# Names unique to this cluster, so no node, partition or /etc/hosts line is another's.
id=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
cluster="cb$id"
node1="${cluster}n1"
node2="${cluster}n2"
hosts_line="127.0.0.1 $node1 $node2 # commbench test cluster $dir"
# munged refuses a socket under a directory others cannot enter, such as pytest's tmp dirs
munge_dir=$(mktemp -d /tmp/commbench-munge.XXXXXX)
chmod 0755 "$munge_dir"
declare -p cluster node1 node2 hosts_line munge_dir >"$vars"
trap 'stop' EXIT  # a start that fails leaves nothing behind

mkdir -p "$dir/state" "$dir/spool"
hosts_add

# Each daemon runs in the foreground of its own session, in the background of this script, so
# its pid is known at once ($!), also when it dies before writing a pid file (slurmd does on a
# taken port), and the checks and `stop` watch that very process.
launch() {  # launch PIDFILE LOG COMMAND...
    local pidfile=$1 log=$2
    shift 2
    setsid env "$mark" "$@" </dev/null >>"$log" 2>&1 &
    echo $! >"$pidfile"
}

dd if=/dev/urandom of="$munge_dir/munge.key" bs=1024 count=1 status=none
chmod 0400 "$munge_dir/munge.key"
launch "$munge_dir/munged.pid" "$dir/munged.out" munged --foreground \
    --socket="$munge_dir/munge.socket" --key-file="$munge_dir/munge.key" \
    --pid-file="$munge_dir/munged.pid" --log-file="$dir/munged.log" \
    --seed-file="$munge_dir/munged.seed"
for _ in $(seq 50); do
    munge -n -S "$munge_dir/munge.socket" 2>/dev/null | unmunge -S "$munge_dir/munge.socket" \
        >/dev/null 2>&1 && break
    sleep 0.1
done
munge -n -S "$munge_dir/munge.socket" | unmunge -S "$munge_dir/munge.socket" >/dev/null || {
    echo "munged did not come up" >&2; tail -5 "$dir/munged.log" >&2; exit 1; }

# A free TCP port below the ephemeral range (so no outgoing connection is given it meanwhile)
# that nothing listens on; another process may still take it before our daemon binds it,
# which the checks below catch, and the next attempt picks other ports.
pick_ports() {
    local port picked=""
    while [ "$(wc -w <<<"$picked")" -lt 3 ]; do
        port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000))
        case " $picked " in *" $port "*) continue ;; esac
        [ -z "$(ss -Htan "sport = :$port")" ] || continue
        picked="$picked $port"
    done
    read -r ctld_port node1_port node2_port <<<"$picked"
}

write_conf() {
    cat >"$conf" <<CONF
ClusterName=$cluster
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_dir/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
FirstJobId=$first_job_id
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
NodeName=$node1 NodeAddr=127.0.0.1 Port=$node1_port CPUs=$(nproc) State=UNKNOWN
NodeName=$node2 NodeAddr=127.0.0.1 Port=$node2_port CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$node1,$node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
}

# 0 once the daemon of pid file $1 is alive and that very pid listens on port $2; 1 while it
# may still get there; 2 when it cannot (dead, or the port is someone else's).
listening() {
    local pid holders
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    alive "$pid" || return 2
    holders=$(ss -Hltnp "sport = :$2")
    [ -n "$holders" ] || return 1
    grep -q "pid=$pid," <<<"$holders" && return 0
    # someone else's socket; ours may yet bind beside it on another address, but a daemon
    # that had to give way cannot serve our cluster
    return 2
}

# Wait (up to 60 s, less if a daemon dies or loses its port) until both nodes are ours, up and
# idle in our slurmctld.
wait_up() {
    local deadline=$((SECONDS + 60)) rc states
    while [ $SECONDS -lt $deadline ]; do
        local all=0
        for pair in "slurmctld.pid $ctld_port" "slurmd.$node1.pid $node1_port" \
            "slurmd.$node2.pid $node2_port"; do
            set -- $pair
            rc=0
            listening "$dir/$1" "$2" || rc=$?
            if [ $rc = 2 ]; then
                echo "attempt $attempt: ${1%.pid} did not get port $2:" >&2
                ss -Hltnp "sport = :$2" >&2 || true
                return 1
            fi
            [ $rc = 0 ] || all=1
        done
        if [ $all = 0 ] && SLURM_CONF="$conf" scontrol ping 2>/dev/null | grep -q 'UP'; then
            states=$(SLURM_CONF="$conf" sinfo -h -N -o '%N=%t' 2>/dev/null | sort -u | tr '\n' ' ')
            [ "$states" = "$node1=idle $node2=idle " ] && return 0
        fi
        sleep 0.2
    done
    echo "attempt $attempt: cluster did not come up in 60 s; sinfo:" >&2
    SLURM_CONF="$conf" sinfo -N >&2 || true
    return 1
}

export SLURM_CONF="$conf"
for attempt in 1 2 3; do
    pick_ports
    write_conf
    # -f: each daemon's command line names our slurm.conf, which `stop` checks before killing
    launch "$dir/slurmctld.pid" "$dir/slurmctld.out" slurmctld -D -f "$conf" -c -i
    launch "$dir/slurmd.$node1.pid" "$dir/slurmd.$node1.out" slurmd -D -f "$conf" -N "$node1"
    launch "$dir/slurmd.$node2.pid" "$dir/slurmd.$node2.out" slurmd -D -f "$conf" -N "$node2"
    if wait_up; then
        trap - EXIT
        echo "export SLURM_CONF=$conf"
        exit 0
    fi
    tail -3 "$dir"/slurmctld.log "$dir"/slurmd.*.log >&2 || true
    stop_slurm
    rm -rf "$dir/state" "$dir/spool" && mkdir -p "$dir/state" "$dir/spool"
done
echo "cluster did not come up in 3 attempts" >&2
exit 1
