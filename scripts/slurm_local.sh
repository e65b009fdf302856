#!/usr/bin/env bash
# A one-node SLURM cluster on this machine (munge + slurmctld + slurmd on localhost), for the tests of
# `yolo-det seeds --executor slurm` (tests/studies/test_slurm.py) and for trying the executor by hand.
#
#   bash scripts/slurm_local.sh          install (Debian/Ubuntu, as root) if needed, write the config, start
#   bash scripts/slurm_local.sh stop     stop the daemons this script started
#
# Each start clears SLURM's saved state (-c): jobs of an earlier start are gone.
# Where it cannot (not root, no apt-get, the daemons do not start) it prints why and exits 0: the SLURM
# tests then skip with that reason (`sinfo` does not answer). Accounting is off (no slurmdbd), so `sacct`
# does not work; yolo-det's executor does not need it.
set -u

say() { echo "slurm_local: $*"; }
skip() { say "$* -- no local SLURM; the SLURM tests will be skipped"; exit 0; }

STATE=${SLURM_LOCAL_STATE:-/var/lib/yolo-det-slurm}
CONF=/etc/slurm/slurm.conf

if [ "${1:-start}" = "stop" ]; then
    for name in slurmd slurmctld; do
        if [ -f "$STATE/$name.pid" ]; then kill "$(cat "$STATE/$name.pid")" 2>/dev/null && say "stopped $name"; fi
    done
    if [ -f /run/munge/munged.pid ]; then kill "$(cat /run/munge/munged.pid)" 2>/dev/null && say "stopped munged"; fi
    for _ in $(seq 20); do  # until they have exited (a start right after finds none)
        pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break
        sleep 0.5
    done
    exit 0
fi

node_up() { timeout 5 sinfo -h -o %t 2>/dev/null | grep -q -E '^(idle|mix|alloc|comp)'; }
if command -v sinfo >/dev/null 2>&1 && node_up; then
    say "a SLURM cluster already answers:"; sinfo; exit 0
fi
[ "$(id -u)" = 0 ] || skip "not root (installing and starting slurmctld, slurmd and munged needs root)"

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || skip "slurm-wlm is not installed and there is no apt-get to install it"
    say "installing slurm-wlm and munge"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/tmp/slurm_local_apt.log 2>&1; then
        tail -5 /tmp/slurm_local_apt.log
        skip "apt-get install slurm-wlm munge failed (log: /tmp/slurm_local_apt.log)"
    fi
fi

# munge: the key the package made (else a new one), its daemon
if [ ! -s /etc/munge/munge.key ]; then
    (command -v mungekey >/dev/null && mungekey --create --keyfile /etc/munge/munge.key) \
        || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key 2>/dev/null; chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null
if ! munge -n >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force 2>/dev/null \
        || skip "munged does not start"
    sleep 1
    munge -n >/dev/null 2>&1 || skip "munged started but does not answer"
fi

# the configuration: this host's name, CPUs and memory
HOST=$(hostname -s)
CPUS=$(nproc)
MEM=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
mkdir -p "$STATE/ctld" "$STATE/d" /etc/slurm
cat >"$CONF" <<EOF
# written by yolo-det's scripts/slurm_local.sh: a one-node cluster on localhost
ClusterName=yolodet
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=defer_batch
JobRequeue=1
ReturnToService=2
MinJobAge=600
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
cat >/etc/slurm/cgroup.conf <<EOF
CgroupAutomount=no
EOF

pgrep -F "$STATE/slurmctld.pid" >/dev/null 2>&1 || /usr/sbin/slurmctld -c -i || skip "slurmctld does not start (log: $STATE/slurmctld.log)"
pgrep -F "$STATE/slurmd.pid" >/dev/null 2>&1 || /usr/sbin/slurmd -c || skip "slurmd does not start (log: $STATE/slurmd.log)"
for _ in $(seq 30); do
    if node_up; then
        say "one-node SLURM on $HOST ($CPUS CPUs, $MEM MB) is up:"; sinfo; exit 0
    fi
    sleep 1
done
scontrol update nodename="$HOST" state=resume >/dev/null 2>&1
node_up && { sinfo; exit 0; }
tail -5 "$STATE/slurmctld.log" "$STATE/slurmd.log" 2>/dev/null
skip "the daemons started but the node is not idle (logs in $STATE)"
