#!/usr/bin/env bash
# Start a one-node SLURM 22.05 cluster on localhost for tests and CI: munge, MariaDB, slurmdbd,
# slurmctld and slurmd (-N localhost), fake GPU character devices, no cgroups, no systemd.
# Two accounts with GPU limits (GrpTRES=gres/gpu=N) so that per-account GPU slots are enforced by
# SLURM itself. Run as root. Idempotent: running it again rewrites the config files, starts only
# what is not running and re-applies the account limits (a changed node config, e.g. SLURM_FAKE_GPUS,
# needs scripts/slurm-down.sh first: running daemons are not restarted).
#
# Environment (all optional):
#   SLURM_TEST_ACCOUNTS  "name:gpus,..."  accounts and their GPU limits   (default acct_a:3,acct_b:2)
#   SLURM_FAKE_GPUS      GPUs on the node; more than the account limits    (default 8)
#   SLURM_FAKE_CPUS      CPUs the node advertises (config_overrides)       (default 16)
#   SLURM_REAL_MEMORY    node memory in MB; default 3/4 of MemTotal, so below the machine's memory
#   SLURM_TEST_USERS     users associated with every account (default: the invoking user, id -un,
#                        and $USER when it names someone else: Snakemake 7.21 checks accounts for
#                        $USER, sbatch for the real user)
#
# Partitions: cpu (default) and gpu, both on node localhost. Logs: /var/log/slurm/.
set -euo pipefail

# Close every inherited descriptor above 2 but bash's own 255: run as `flock /tmp/kintsugi-slurm.lock
# scripts/slurm-up.sh`, the lock's descriptor would otherwise pass to the daemons started here, which
# would then hold the lock for as long as they run (every later flock waits forever).
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  case "$fd" in [3-9] | [1-9][0-9] | 1[0-9][0-9] | 2[0-4][0-9] | 25[0-4]) eval "exec $fd>&-" ;; esac
done
ACCOUNTS=${SLURM_TEST_ACCOUNTS:-acct_a:3,acct_b:2}
GPUS=${SLURM_FAKE_GPUS:-8}
CPUS=${SLURM_FAKE_CPUS:-16}
mem_total_mb=$(awk '/^MemTotal:/ {print int($2/1024)}' /proc/meminfo)
MEM=${SLURM_REAL_MEMORY:-$((mem_total_mb * 3 / 4))}
me=$(id -un)
USERS=${SLURM_TEST_USERS:-$(printf '%s\n' "$me" "${USER:-$me}" | sort -u | xargs)}
LOG=/var/log/slurm

die() { echo "slurm-up: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
[ "$MEM" -lt "$mem_total_mb" ] || die "SLURM_REAL_MEMORY=$MEM must be below the machine's $mem_total_mb MB"

# ---- packages (only if missing) ------------------------------------------------
# DPkg::Lock::Timeout makes apt wait for another apt/dpkg run (e.g. one started at boot) instead of failing.
pkgs="munge slurm-wlm slurmdbd mariadb-server snakemake python3-tifffile python3-jsonschema"
if ! dpkg -s $pkgs >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=900 update -qq
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends $pkgs >/dev/null
fi

# ---- directories, fake GPU device nodes ----------------------------------------
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOG" /var/lib/slurm-fakegpu
install -d -o munge -g munge -m 755 /run/munge
last=$((GPUS - 1))
for i in $(seq 0 "$last"); do
  f=/var/lib/slurm-fakegpu/nvidia$i
  [ -c "$f" ] || mknod -m 666 "$f" c 1 3 # char device, same numbers as /dev/null
done

# ---- config files -----------------------------------------------------------------
cat >/etc/slurm/slurm.conf <<EOF
# Written by scripts/slurm-up.sh (test cluster; do not edit by hand).
ClusterName=ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageEnforce=associations,limits
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
GresTypes=gpu
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
DefMemPerCPU=256
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM Gres=gpu:$GPUS State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=NO  MaxTime=INFINITE State=UP
PartitionName=cpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
cat >/etc/slurm/gres.conf <<EOF
AutoDetect=off
NodeName=localhost Name=gpu File=/var/lib/slurm-fakegpu/nvidia[0-$last]
EOF
cat >/etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmdbpass
StorageLoc=slurm_acct_db
EOF
chmod 600 /etc/slurm/slurmdbd.conf

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() { # $1 tries (0.2 s each), rest: command
  local n=$1; shift
  for _ in $(seq 1 "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

# ---- munge ---------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  mungekey -c -f
  chown munge:munge /etc/munge/munge.key
fi
pid_alive /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
wait_for 50 sh -c 'munge -n | unmunge' || die "munge does not work"

# ---- MariaDB + slurmdbd ----------------------------------------------------------------
install -d -o mysql -g mysql /run/mysqld
[ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >"$LOG/mariadb-install.log" 2>&1
if ! mariadb-admin ping >/dev/null 2>&1; then
  # setsid + stdin from /dev/null: the server must not hold the caller's terminal or CI's stdout.
  setsid /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 </dev/null >>"$LOG/mariadb.log" 2>&1 &
  wait_for 150 mariadb-admin ping || die "mariadb did not start (see $LOG/mariadb.log)"
fi
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmdbpass';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
pid_alive /run/slurmdbd.pid || slurmdbd
wait_for 150 sacctmgr -n show cluster || die "slurmdbd did not answer (see $LOG/slurmdbd.log)"

# ---- cluster, accounts, GPU limits, user -------------------------------------------------
# `sacctmgr -i add` exits 1 when the entity already exists; that is fine here.
sacctmgr -i add cluster ci >/dev/null 2>&1 || true
names=()
limits=()
for spec in ${ACCOUNTS//,/ }; do
  name=${spec%%:*}
  gpus=${spec#*:}
  [[ -n $name && $gpus =~ ^[0-9]+$ && $spec == *:* ]] || die "bad SLURM_TEST_ACCOUNTS entry '$spec' (want name:gpus)"
  sacctmgr -i add account "$name" cluster=ci >/dev/null 2>&1 || true
  names+=("$name")
  limits+=("$gpus")
done
[ ${#names[@]} -gt 0 ] || die "no accounts in SLURM_TEST_ACCOUNTS"
acct_list=$(IFS=,; echo "${names[*]}")
for u in $USERS; do
  sacctmgr -i add user "$u" account="$acct_list" defaultaccount="${names[0]}" >/dev/null 2>&1 || true
  for name in "${names[@]}"; do
    sacctmgr -n -P show assoc account="$name" user="$u" format=account | grep -qx "$name" ||
      die "user $u is not associated with account $name"
  done
done

# ---- slurmctld + slurmd -----------------------------------------------------------------
if ! pid_alive /run/slurmctld.pid; then
  rm -rf /var/spool/slurmctld/* # fresh controller state: no stale DRAIN, no old jobs
  # A fresh controller numbers jobs from FirstJobId again, but slurmdbd keeps the old jobs: a new
  # job 13 would share its id with an old COMPLETED job 13, and a status query by id (Snakemake's
  # sacct -j) could see the old one and call a pending job finished. Start above every recorded id.
  last=$(sacct -a -X -n -P --starttime 2000-01-01 --format=JobIdRaw 2>/dev/null | grep -E '^[0-9]+$' | sort -n | tail -n 1 || true)
  sed -i '/^FirstJobId=/d' /etc/slurm/slurm.conf
  echo "FirstJobId=$(( ${last:-0} + 1 ))" >>/etc/slurm/slurm.conf
  slurmctld
fi
pid_alive /run/slurmd.pid || slurmd -N localhost # -N: node name independent of the hostname

# ---- readiness ----------------------------------------------------------------------------
# scontrol, not sinfo: sinfo's state column lags (shows "mix" for a while after jobs end).
state=
for _ in $(seq 1 120); do
  state=$(scontrol show node localhost -o 2>/dev/null | grep -oE 'State=[^ ]+' || true)
  case "$state" in
    State=IDLE | State=MIXED | State=ALLOCATED) break ;; # not IDLE+DRAIN etc.
  esac
  state=
  sleep 0.5
done
if [ -z "$state" ]; then
  echo "slurm-up: node not ready" >&2
  scontrol show node localhost >&2 || true
  tail -n 30 "$LOG/slurmctld.log" "$LOG/slurmd.log" >&2 || true
  exit 1
fi

# ---- GPU limits -----------------------------------------------------------------------------
# slurmdbd knows the TRES gres/gpu only after slurmctld (AccountingStorageTRES=gres/gpu) registered,
# so the limits are set last. slurmdbd pushes the change to the running slurmctld.
has_gpu_tres() { sacctmgr -n -P show tres type=gres name=gpu format=name | grep -qx gpu; }
wait_for 150 has_gpu_tres || die "slurmdbd does not know TRES gres/gpu (see $LOG/slurmctld.log)"
for i in "${!names[@]}"; do
  sacctmgr -i modify account name="${names[$i]}" set GrpTRES=gres/gpu="${limits[$i]}" >/dev/null
  got=$(sacctmgr -n -P show assoc account="${names[$i]}" user= format=grptres)
  [ "$got" = "gres/gpu=${limits[$i]}" ] || die "account ${names[$i]}: GrpTRES is '$got', want gres/gpu=${limits[$i]}"
done
# Wait until the controller itself enforces them (the push from slurmdbd is asynchronous).
ctld_limit() { # $1 account, $2 gpus: the account's own association in slurmctld has the limit
  scontrol show assoc_mgr flags=assoc accounts="$1" |
    awk '/^ClusterName=/ {own = / UserName= /} own && /GrpTRES=/' | grep -q "gres/gpu=$2("
}
for i in "${!names[@]}"; do
  wait_for 150 ctld_limit "${names[$i]}" "${limits[$i]}" ||
    die "slurmctld does not show GrpTRES gres/gpu=${limits[$i]} for ${names[$i]} (scontrol show assoc_mgr)"
done
echo "slurm-up: ready: node localhost ($CPUS CPUs, $GPUS GPUs, ${MEM} MB), partitions cpu gpu, accounts $ACCOUNTS, users $USERS"
sacctmgr -n -P show assoc account="$acct_list" format=account,user,grptres | sed 's/^/  assoc account|user|grptres: /'
