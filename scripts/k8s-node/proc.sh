# shellcheck shell=bash
# Process helpers of the node kit, sourced by its lib.sh: processes
# are recorded as $PIDS/NAME.pid and stopped only while they still run the recorded binary.
# The sourcing script defines PIDS and log.

pid_of() { cat "$PIDS/$1.pid" 2>/dev/null || true; }
exe_of() { local e; e=$(readlink "/proc/$1/exe" 2>/dev/null) || return 0; echo "${e% (deleted)}"; }

# is_ours NAME EXE: the PID recorded for NAME is alive and still runs EXE
is_ours() {
  local pid; pid=$(pid_of "$1")
  [ -n "$pid" ] && alive "$pid" && [ "$(exe_of "$pid")" = "$(readlink -f "$2")" ]
}

# alive PID: the process exists and is not a zombie waiting to be reaped
alive() { [ -d "/proc/$1" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]; }

# kill_pid PID WHAT: TERM, wait up to 15 s, then KILL
kill_pid() {
  local pid=$1 what=$2 i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do alive "$pid" || return 0; sleep 0.1; done
  log "$what (pid $pid) did not exit, sending KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do alive "$pid" || return 0; sleep 0.1; done
  log "$what (pid $pid) is still there"
}

# stop_one NAME EXE: stop the process recorded for NAME (only if it still runs EXE)
stop_one() {
  local name=$1 exe=$2 pid kids
  pid=$(pid_of "$name")
  if [ -n "$pid" ] && is_ours "$name" "$exe"; then
    # socat forks one child per connection: take them along
    kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null || true)
    log "stopping $name (pid $pid)"
    kill_pid "$pid" "$name"
    for k in $kids; do
      [ "$(exe_of "$k")" = "$(readlink -f "$exe")" ] && kill_pid "$k" "$name child"
    done
  elif [ -n "$pid" ]; then
    log "$name: recorded pid $pid is not running (or no longer $exe); nothing to stop"
  fi
  rm -f "$PIDS/$name.pid" "$PIDS/$name.sig"
}

wait_for() { # description timeout-seconds command...
  local what=$1 t=$2 i; shift 2
  for ((i = 0; i < t * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  log "timed out after ${t}s waiting for $what"; return 1
}
