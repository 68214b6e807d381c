# Sourced by the tests/cli shell tests: one summond as a subprocess, its
# cleanup, and the runfiles both tests use. The sourcing test sets `work` (a
# scratch directory) first and may set `cleanup_extra` to a function run at
# exit before `work` is removed.

runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
summond_bin="$runfiles/server/summond"
summonctl_bin="$runfiles/client/summonctl"
seeded_values="$runfiles/tests/cli/seeded_values"
summond_pid=""
cleanup_extra=""

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cleanup() {
  if [ -n "$summond_pid" ] && kill -0 "$summond_pid" 2>/dev/null; then
    kill -KILL "$summond_pid" 2>/dev/null
    wait "$summond_pid" 2>/dev/null
  fi
  if [ -n "$cleanup_extra" ]; then "$cleanup_extra"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' TERM INT  # Bazel's timeout: still clean up.

# start_summond ARGS...: summond on a free loopback port with ARGS; sets
# `server` to its address.
start_summond() {
  rm -f "$work/port"
  "$summond_bin" --insecure-local --listen 127.0.0.1:0 --port-file "$work/port" \
    --log-level warn "$@" &
  summond_pid=$!
  for _ in $(seq 100); do
    [ -s "$work/port" ] && break
    kill -0 "$summond_pid" 2>/dev/null || fail "summond exited at start"
    sleep 0.1
  done
  [ -s "$work/port" ] || fail "summond wrote no port file in 10 s"
  server="127.0.0.1:$(cat "$work/port")"
}

# SIGTERM must stop summond within 10 s with exit status 0.
stop_summond() {
  kill -TERM "$summond_pid"
  for _ in $(seq 100); do
    kill -0 "$summond_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$summond_pid" 2>/dev/null && fail "summond ignored SIGTERM for 10 s"
  wait "$summond_pid"
  local status=$?
  summond_pid=""
  [ "$status" -eq 0 ] || fail "summond exited with status $status after SIGTERM"
}
