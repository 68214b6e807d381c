#!/bin/bash
# Checks deploy/entrypoint.sh: each listed node gets its rank and the shared
# --nodes list; an unlisted node is refused; a one-node list runs standalone.
set -euo pipefail
entry="$TEST_SRCDIR/summon/deploy/entrypoint.sh"
config=$(mktemp -d)
trap 'rm -rf "$config"' EXIT
printf 'a 10.0.0.1:7070\nb 10.0.0.2:7070\nc 10.0.0.3:7070\n' > "$config/nodes.txt"
echo 4 > "$config/local-ranks"
echo 1024 > "$config/memory-budget"
echo 200 > "$config/heartbeat-ms"
echo 3000 > "$config/collective-timeout-ms"
run() { SUMMON_CONFIG="$config" SUMMON_DRY_RUN=1 NODE_NAME="$1" sh "$entry"; }

out=$(run b)
expected="/opt/summon/summond --local-ranks 4 --memory-budget 1024 --heartbeat-ms 200 --collective-timeout-ms 3000 --data-dir /var/lib/summon --nodes 10.0.0.1:7070,10.0.0.2:7070,10.0.0.3:7070 --node-rank 1"
[ "$out" = "$expected" ] || { echo "node b: got '$out'"; exit 1; }
run c | grep -q -- "--node-rank 2$" || { echo "node c: wrong rank"; exit 1; }
if run z 2>/dev/null; then echo "unlisted node accepted"; exit 1; fi
printf 'solo 10.0.0.9:7070\n' > "$config/nodes.txt"
run solo | grep -q -- "--listen 0.0.0.0:7070$" || { echo "single node"; exit 1; }
echo "entrypoint_test: 4 checks passed"
