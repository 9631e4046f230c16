#!/usr/bin/env bash
# Start a throwaway local Slurm cluster for the controller's end-to-end tests and print the env
# line they need. Four node names on this one host (one `slurmd -N nodeK` each), munge with its
# own key and socket, proctrack/linuxproc and task/none (no cgroups), ReturnToService=1.
#
#   eval "$(.ci/slurm.sh)"        # exports LOGDX_TEST_SLURM_CONF (and SLURM_CONF)
#   .ci/slurm.sh stop             # stops the daemons
#
# Installs Debian's slurmctld slurmd slurm-client munge when missing (needs root + apt-get).
# Idempotent: a running cluster is reused. Progress goes to stderr; stdout carries only export
# lines, so `eval` is safe. Ports: slurmctld on $LOGDX_SLURM_PORT (default 18350), the slurmds
# on the next four.
set -euo pipefail

DIR="${LOGDX_SLURM_DIR:-/tmp/logdx-slurm}"
PORT="${LOGDX_SLURM_PORT:-18350}"
NODES="${LOGDX_SLURM_NODES:-4}"
HOST="$(hostname -s)"
log() { echo "slurm.sh: $*" >&2; }
CONF="$DIR/etc/slurm.conf"
MUNGE_SOCK="$DIR/munge/munge.socket.2"

stop() {
  for pidf in "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid" "$DIR/munge/munged.pid"; do
    [[ -f "$pidf" ]] || continue
    pid="$(cat "$pidf")"
    kill "$pid" 2>/dev/null || true
    rm -f "$pidf"
  done
}

if [[ "${1:-start}" == "stop" ]]; then
  stop
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v srun >/dev/null; then
  log "installing Debian's slurmctld slurmd slurm-client munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq slurmctld slurmd slurm-client munge >&2
fi

mkdir -p "$DIR"/{etc,munge,state,spool,run,log,epilog.d}
chmod 700 "$DIR/munge"
if [[ ! -f "$DIR/munge/munge.key" ]]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$DIR/munge/munge.key"
fi

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

if ! alive "$DIR/munge/munged.pid"; then
  log "starting munged ($MUNGE_SOCK)"
  munged --force --socket="$MUNGE_SOCK" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/seed" >&2
fi

{
  cat <<CONF
ClusterName=logdx
SlurmctldHost=$HOST
SlurmctldPort=$PORT
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK,cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=1
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/linear
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
LaunchParameters=enable_nss_slurm
MinJobAge=3600
EpilogSlurmctld=$DIR/etc/epilog.sh
KillWait=3
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
MessageTimeout=20
Waittime=0
CONF
  for i in $(seq 1 "$NODES"); do
    echo "NodeName=node$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((PORT + i)) CPUs=1 RealMemory=1000 State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
} > "$CONF.new"
# EpilogSlurmctld runs every executable hook in $DIR/epilog.d (none by default): a test installs
# one that runs examples/slurm_epilog.sh against its server, as a site's epilog would
cat > "$DIR/etc/epilog.sh" <<EPILOG
#!/bin/bash
export PATH=/usr/local/bin:/usr/bin:/bin SLURM_CONF=$CONF
for hook in $DIR/epilog.d/*; do
  [[ -x "\$hook" ]] && "\$hook" >>"$DIR/log/epilog.log" 2>&1
done
exit 0
EPILOG
chmod 755 "$DIR/etc/epilog.sh"
changed=0
if ! cmp -s "$CONF.new" "$CONF"; then mv "$CONF.new" "$CONF"; changed=1; else rm -f "$CONF.new"; fi
export SLURM_CONF="$CONF"

if ! alive "$DIR/run/slurmctld.pid"; then
  log "starting slurmctld on $HOST:$PORT"
  slurmctld -f "$CONF" -i >&2
elif [[ "$changed" == 1 ]]; then
  log "slurm.conf changed: scontrol reconfigure"
  scontrol reconfigure >&2 || true
fi
for i in $(seq 1 "$NODES"); do
  mkdir -p "$DIR/spool/node$i"
  if ! alive "$DIR/run/slurmd-node$i.pid"; then
    slurmd -f "$CONF" -N "node$i" >&2
  fi
done

for _ in $(seq 1 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|alloc'; then
    up="$(sinfo -h -N -o '%N %T' | grep -cE 'idle|mixed|alloc' || true)"
    [[ "$up" -ge "$NODES" ]] && break
  fi
  sleep 1
done
# nodes drained by an earlier run come back
for i in $(seq 1 "$NODES"); do
  scontrol update NodeName="node$i" State=RESUME >/dev/null 2>&1 || true
done
log "$(sinfo -h -N -o '%N %T' | tr '\n' ' ')"
echo "export SLURM_CONF=$CONF LOGDX_TEST_SLURM_CONF=$CONF"
