#!/bin/bash
# Runs scripts/demo_failover (scripts/demo's last part) with the built
# summond and summonctl: a 3-node cluster on a real etcd loses its leader to
# kill -9 and serves again under another leader and a higher epoch, the same
# bytes read before and after. Checks what it prints and that it leaves
# nothing behind: no file under its temporary directory (etcd's data, the
# data dirs) and no /dev/shm segment of its nodes.
set -euo pipefail
root="$TEST_SRCDIR/summon"
export TMPDIR="$TEST_TMPDIR/demo"
mkdir -p "$TMPDIR"
out="$TEST_TMPDIR/demo_failover.out"
if ! "$root/scripts/demo_failover" "$root" > "$out" 2>&1; then
  cat "$out"
  echo "demo_failover failed"
  exit 1
fi
cat "$out"
for line in "gpt-r through the survivors == gpt before the kill: yes" \
            "after failover == before: yes" "failover OK"; do
  grep -qxF "$line" "$out" || { echo "missing: $line"; exit 1; }
done
# The survivor names the node that led (the one killed), not node 0.
killed=$(sed -n 's/^.*== kill -9 the leader, node \([0-9]\).*$/\1/p' "$out")
[ -n "$killed" ] || { echo "no kill reported"; exit 1; }
grep -qE "^node [0-9] leads now \(epoch [0-9]+ > [0-9]+\), node $killed still down\$" "$out" ||
  { echo "no new leader reported while node $killed was down"; exit 1; }
grep -q "^ERROR UNAVAILABLE: model 'gpt' is unavailable: it needs rank $killed on node $killed," "$out" ||
  { echo "the FULL_SHARD model's refusal did not name node $killed"; exit 1; }
grep -qE "^node $killed came back as a follower of node [0-9]\$" "$out" ||
  { echo "node $killed did not come back as a follower"; exit 1; }
grep -q "^ERROR UNAVAILABLE: node $killed (the leader)" "$out" ||
  { echo "the survivor's UNAVAILABLE did not name node $killed"; exit 1; }
work=$(sed -n "s/^etcd's data, the nodes' data dirs and logs under //p" "$out")
[ -n "$work" ] || { echo "the work directory was not printed"; exit 1; }
[ ! -e "$work" ] || { echo "left behind: $work"; exit 1; }
[ -z "$(ls -A "$TMPDIR")" ] || { echo "left in TMPDIR: $(ls -A "$TMPDIR")"; exit 1; }
source "$root/scripts/demo_lib.sh"
for node in 0 1 2; do
  instance=$(instance_of "$work/node$node")
  if compgen -G "/dev/shm/summon-$instance-*" > /dev/null; then
    echo "segments left: $(ls /dev/shm/summon-"$instance"-*)"
    exit 1
  fi
done
echo "demo_failover_test: passed"
