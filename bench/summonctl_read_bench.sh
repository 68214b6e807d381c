#!/usr/bin/env bash
# summonctl `tensor read` of one 1 GiB float32 tensor to a file, beside the
# raw ReadTensor rate summon_bench measures for the same bytes in the same
# run (issue 12's target: summonctl at >= 80% of it, peak RSS <= 64 MiB).
# Both read over loopback TCP from a summond with 4 local ranks; summonctl's
# peak RSS comes from /usr/bin/time's getrusage of the child. summonctl on
# the daemon's host reads a read-only session from its memory (MapSession);
# `--no-map` rows stream over gRPC as a client on another host does.
#   bench/summonctl_read_bench.sh            # BYTES=1073741824 REPEATS=3
set -euo pipefail
cd "$(dirname "$0")/.."
bytes=${BYTES:-1073741824}
repeats=${REPEATS:-3}
bazel build //bench:summon_bench //server:summond //client:summonctl
bin=bazel-bin
work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "# $(date -u +%FT%TZ) load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
# 1. summon_bench: the raw ReadTensor rate of the same bytes (median of
#    REPEATS, in-process summond, no file).
"$bin/bench/summon_bench" --ops=read --min_bytes="$bytes" --max_bytes="$bytes" \
  --large_bytes="$bytes" --large_iters="$repeats" --iters="$repeats" \
  --local_ranks=4 >"$work/bench.txt"
raw_gbs=$(awk -v size="$bytes" '$1 == size { print $5; exit }' "$work/bench.txt")
[ -n "$raw_gbs" ] || { cat "$work/bench.txt"; echo "no ReadTensor row" >&2; exit 1; }

# 2. summonctl against a summond process: one float32 tensor of BYTES.
"$bin/server/summond" --insecure-local --listen 127.0.0.1:0 \
  --port-file "$work/port" --local-ranks 4 --log-level warn &
pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
export SUMMON_SERVER="127.0.0.1:$(cat "$work/port")"
numel=$((bytes / 4))
printf '{"units": [{"fqn": "", "params": [{"fqn": "w", "shape": [%d], "dtype": "float32"}]}]}\n' \
  "$numel" >"$work/layout.json"
"$bin/client/summonctl" model create big --layout "$work/layout.json" \
  --init seeded:7 >/dev/null
sid=$("$bin/client/summonctl" session open big --no-writeback 2>/dev/null | head -n1)
# Each repeat reads twice: into /dev/null through stdout (`--out -`: the
# wire and summonctl alone) and into a file on $TMPDIR (what a user does; a
# disk slower than the wire shows here, not in the first figure).
declare -a null_rates file_rates streamed_rates rss
timed_read() {  # OUT [FLAGS...]: prints "GB/s KiB"
  local out=$1
  shift
  /usr/bin/time -f '%e %M' -o "$work/time.txt" \
    "$bin/client/summonctl" --quiet tensor read "$sid" w --out "$out" "$@" >/dev/null
  read -r seconds kib <"$work/time.txt"
  echo "$(awk -v b="$bytes" -v s="$seconds" 'BEGIN { printf "%.2f", b / s / 1e9 }') $kib"
}
for _ in $(seq "$repeats"); do
  read -r rate kib < <(timed_read -)
  null_rates+=("$rate"); rss+=("$kib")
  rm -f "$work/w.npy"
  read -r rate kib < <(timed_read "$work/w.npy")
  file_rates+=("$rate"); rss+=("$kib")
  rm -f "$work/w.npy"
  read -r rate kib < <(timed_read - --no-map)
  streamed_rates+=("$rate"); rss+=("$kib")
done
"$bin/client/summonctl" session close "$sid" >/dev/null
"$bin/client/summonctl" model delete big >/dev/null
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
null_gbs=$(median "${null_rates[@]}")
streamed_gbs=$(median "${streamed_rates[@]}")
file_gbs=$(median "${file_rates[@]}")
peak_kib=$(printf '%s\n' "${rss[@]}" | sort -g | tail -n1)
ratio() { awk -v a="$1" -v b="$raw_gbs" 'BEGIN { printf "%.2f", a / b }'; }
printf '%-40s %10s\n' "bytes" "$bytes"
printf '%-40s %10s GB/s\n' "summon_bench ReadTensor (median)" "$raw_gbs"
printf '%-40s %10s GB/s  ratio %s (target >= 0.80)  runs: %s\n' \
  "summonctl tensor read --out - >/dev/null" "$null_gbs" "$(ratio "$null_gbs")" "${null_rates[*]}"
printf '%-40s %10s GB/s  ratio %s  runs: %s\n' \
  "summonctl tensor read --out FILE" "$file_gbs" "$(ratio "$file_gbs")" "${file_rates[*]}"
printf '%-40s %10s GB/s  ratio %s (target >= 0.80)  runs: %s\n' \
  "  ... --no-map --out - (streamed)" "$streamed_gbs" "$(ratio "$streamed_gbs")" "${streamed_rates[*]}"
printf '%-40s %10s MiB   (target <= 64)\n' "summonctl peak RSS" "$((peak_kib / 1024))"
