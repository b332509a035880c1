#!/usr/bin/env bash
# Stop the test cluster that scripts/slurm-up.sh started, by PID file only (never by process name).
# Keeps configs, the munge key and the accounting database, so the next slurm-up.sh is fast.
set -u
stop_pidfile() { # $1 pid file; TERM, wait up to 10 s, then KILL
  [ -s "$1" ] || return 0
  local p
  p=$(cat "$1")
  kill "$p" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 "$p" 2>/dev/null || return 0
    sleep 0.2
  done
  echo "slurm-down: pid $p ($1) ignored TERM; killing" >&2
  kill -9 "$p" 2>/dev/null || true
}
stop_pidfile /run/slurmd.pid
stop_pidfile /run/slurmctld.pid
stop_pidfile /run/slurmdbd.pid
if command -v mariadb-admin >/dev/null && mariadb-admin ping >/dev/null 2>&1; then
  mariadb-admin shutdown 2>/dev/null || stop_pidfile /run/mysqld/mysqld.pid
fi
stop_pidfile /run/munge/munged.pid
echo "slurm-down: stopped"
