#!/usr/bin/env bash
# A real summond over TLS with a tokens file: SIGHUP re-reads the file (a new
# token works, a removed one is refused), a broken file keeps the previous
# table, and the daemon keeps serving throughout.
set -euo pipefail
runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
summond="$runfiles/server/summond"
summonctl="$runfiles/client/summonctl"
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/sighup-XXXXXX")
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$runfiles/tests/security/make_pki.sh" "$work/pki"
line() { printf '%s  %s  viewer\n' "$(printf %s "$1" | sha256sum | cut -d' ' -f1)" "$2"; }
printf 'first-token\n' > "$work/first.token"
printf 'second-token\n' > "$work/second.token"
line first-token first > "$work/tokens"

"$summond" --listen 127.0.0.1:0 --port-file "$work/port" --log-level warn \
  --tls-cert "$work/pki/server.crt" --tls-key "$work/pki/server.key" \
  --tokens "$work/tokens" >"$work/summond.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || fail "summond did not start: $(cat "$work/summond.log")"
ctl() {  # TOKEN-NAME ARGS...
  local token=$1
  shift
  "$summonctl" --server "127.0.0.1:$(cat "$work/port")" \
    --tls-ca "$work/pki/ca.crt" --token-file "$work/$token.token" "$@"
}
expect_exit() {  # CODE TOKEN-NAME
  local got=0
  ctl "$2" -o json model list >"$work/out" 2>&1 || got=$?
  [ "$got" -eq "$1" ] || fail "token $2: exit $got, expected $1: $(cat "$work/out")"
}

expect_exit 0 first
expect_exit 16 second

# Rotate: the second token replaces the first.
line second-token second > "$work/tokens"
kill -HUP "$pid"
for _ in $(seq 50); do
  ctl second model list >/dev/null 2>&1 && break
  sleep 0.1
done
expect_exit 0 second
expect_exit 16 first

# A broken file: refused, the table in force stays, summond still serves.
echo "not a tokens file" > "$work/tokens"
kill -HUP "$pid"
sleep 0.5
expect_exit 0 second
grep -q "tokens not reloaded" "$work/summond.log" ||
  fail "no log line for the refused reload: $(cat "$work/summond.log")"
grep -q "not a tokens file" "$work/summond.log" &&
  fail "the log echoes the file's contents"
kill -0 "$pid" || fail "summond died"
echo "PASS"
