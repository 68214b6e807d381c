#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer, ASan and UBSan (bazel
# --config=fuzz, clang) and runs each for FUZZ_SECONDS (default 30) from its
# seed corpus. Prints one line per target and exits with the number of
# targets that failed: a crash, a sanitizer report, a leak, a timeout, or a
# build that did not complete.
#
# New inputs go to a scratch corpus, never into tests/fuzz/corpus. A failing
# target's scratch directory is kept and named: it holds the log and the
# crash-*/leak-*/timeout-* input, which replays with
#   bazel build --config=fuzz //tests/fuzz:TARGET
#   $(bazel info --config=fuzz bazel-bin)/tests/fuzz/TARGET CRASH_FILE
set -uo pipefail
cd "$(dirname "$0")/../.."

seconds=${FUZZ_SECONDS:-30}
targets=(safetensors_header_fuzzer model_layout_fuzzer rpc_request_fuzzer)

bin=$(bazel info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz

failed=0
for target in "${targets[@]}"; do
  # One build per target, so one that does not build fails only itself. gold
  # warns once per ASan check symbol when linking with clang: drop those.
  bazel build --config=fuzz "//tests/fuzz:${target}" 2>&1 |
    grep -v "Cannot export local symbol"
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then
    failed=$((failed + 1))
    echo "fuzz ${target}: FAILED (does not build with --config=fuzz)"
    continue
  fi
  scratch=$(mktemp -d -t "summon-fuzz-${target}-XXXXXX")
  mkdir "${scratch}/corpus"
  "${bin}/${target}" -max_total_time="${seconds}" -timeout=10 \
    -artifact_prefix="${scratch}/" "${scratch}/corpus" \
    "tests/fuzz/corpus/${target}" >"${scratch}/log" 2>&1 &
  pid=$!
  wait "${pid}"
  rc=$?
  # A crashed rpc_request_fuzzer cannot unlink its shared memory (instance
  # "fuzz<pid>") or remove its checkpoint directory: do it here.
  rm -f /dev/shm/summon-fuzz"${pid}"-*
  rm -rf "${TMPDIR:-/tmp}/summon-rpc-fuzzer-${pid}"
  stats=$(grep -o 'Done [0-9]* runs in [0-9]* second' "${scratch}/log" | tail -1)
  coverage=$(grep -o 'cov: [0-9]*' "${scratch}/log" | tail -1)
  if [ "${rc}" -eq 0 ]; then
    echo "fuzz ${target}: ok, ${stats#Done }s, ${coverage:-cov: ?}"
    rm -rf "${scratch}"
  else
    failed=$((failed + 1))
    echo "fuzz ${target}: FAILED (exit ${rc}); log and input in ${scratch}"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|rpc fuzzer|layout invariant|round trip)' \
      "${scratch}/log" | head -5
    tail -n 40 "${scratch}/log" | grep -v '^#'
  fi
done
exit "${failed}"
