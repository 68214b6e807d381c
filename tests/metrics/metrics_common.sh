# Shared by the metrics tests: paths, failure, waiting, scraping.
runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
summond_bin="$runfiles/server/summond"
summonctl_bin="$runfiles/client/summonctl"
layout="$runfiles/examples/gpt_tiny.json"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/metrics_test.XXXXXX")"
pids=()

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cleanup() {
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' TERM INT

# Waits up to 10 s for a non-empty file.
wait_for_file() {
  for _ in $(seq 100); do
    [ -s "$1" ] && return 0
    sleep 0.1
  done
  fail "no $1 after 10 s"
}

# The /metrics text of the daemon whose metrics port is $1.
scrape() {
  curl -sf "http://127.0.0.1:$1/metrics" || fail "GET /metrics on port $1 failed"
}

# expect_sample PORT 'NAME{LABELS}' VALUE: exactly that sample line.
expect_sample() {
  local text
  text="$(scrape "$1")"
  grep -qxF "$2 $3" <<<"$text" ||
    fail "expected '$2 $3' on port $1, got: $(grep -F "${2%%\{*}" <<<"$text" | grep -v '^#')"
}

# Free TCP ports on 127.0.0.1 (bound and released by the kernel's choice).
free_ports() {
  /usr/bin/python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

ctl() {
  "$summonctl_bin" --server "$server" "$@"
}

# start_prometheus CONFIG: a real Prometheus on 127.0.0.1:$pp (query and
# expect_query below ask it).
start_prometheus() {
  promtool check config "$1" >/dev/null || fail "promtool check config"
  # Prometheus writes only beneath --storage.tsdb.path; HOME for good measure.
  HOME="$work" prometheus --config.file="$1" \
    --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$pp" \
    --log.level=warn >"$work/prometheus.log" 2>&1 &
  pids+=($!)
}

# query PROMQL: the single value of an instant query (empty if none).
query() {
  curl -sf "http://127.0.0.1:$pp/api/v1/query" --data-urlencode "query=$1" |
    /usr/bin/python3 -c '
import json, sys
body = json.load(sys.stdin)
result = body["data"]["result"] if body.get("status") == "success" else []
print(result[0]["value"][1] if len(result) == 1 else "")'
}

# expect_query PROMQL VALUE: polls up to 20 s (scrapes every second).
expect_query() {
  local got=""
  for _ in $(seq 80); do
    got="$(query "$1")"
    [ "$got" = "$2" ] && return 0
    sleep 0.25
  done
  fail "PromQL '$1' = '$got', expected '$2'; targets: $(curl -s "http://127.0.0.1:$pp/api/v1/targets"); prometheus log: $(tail -20 "$work/prometheus.log")"
}
