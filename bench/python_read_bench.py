#!/usr/bin/env python3
"""Reads one 256 MiB tensor through the Python client and through summonctl.

Starts its own summond (bazel-bin/server/summond, or $SUMMON_DAEMON), creates
a one-parameter model of 64 Mi float32 elements, opens a read-only session and
reads the tensor `--repeats` times each way in the same run: with
summon.Client.read_tensor (chunks copied into one preallocated NumPy buffer)
and with `summonctl tensor read ID FQN --out F.npy` (the C++ client, process
start and .npy write on tmpfs included), alternately. Prints the best time of
each, the rates and their ratio; the issue's target is at least 0.5.

    scripts/python bench/python_read_bench.py [--mib 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))

import numpy as np  # noqa: E402

import summon  # noqa: E402
from summon.local import LocalDaemon, summonctl_binary  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk-kib", type=int,
                        default=summon.client.READ_CHUNK_BYTES >> 10,
                        help="ReadTensor chunk_bytes of the Python reads")
    args = parser.parse_args()
    numel = args.mib * (1 << 20) // 4
    layout = {"strategy": "FULL_SHARD",
              "units": [{"fqn": "", "params": [
                  {"fqn": "w", "shape": [numel // 1024, 1024], "dtype": "float32"}]}]}

    with tempfile.TemporaryDirectory(prefix="pybench-", dir="/dev/shm") as out_dir, \
            LocalDaemon(local_ranks=1) as daemon:
        client = summon.Client(daemon.address, timeout=300)
        client.create_model("bench", layout, init="seeded:1")
        session = client.open_session("bench", writeback=False)
        buffer = np.empty((numel // 1024, 1024), np.float32)

        # Alternating the two clients spreads the machine's noise over both.
        python_times, ctl_times = [], []
        out_file = os.path.join(out_dir, "w.npy")
        env = dict(os.environ, SUMMON_SERVER=daemon.tcp_address)
        for _ in range(args.repeats):
            start = time.perf_counter()
            client.read_tensor(session.id, "w", out=buffer, chunk_bytes=args.chunk_kib << 10)
            python_times.append(time.perf_counter() - start)

            start = time.perf_counter()
            subprocess.run([summonctl_binary(), "tensor", "read", session.id, "w",
                            "--out", out_file], check=True, env=env,
                           stdout=subprocess.DEVNULL)
            ctl_times.append(time.perf_counter() - start)
            reference = np.load(out_file, mmap_mode="r")
            if not np.array_equal(reference, buffer):
                print("python and summonctl read different data", file=sys.stderr)
                return 1
            del reference
            os.unlink(out_file)
        client.close_session(session.id)

    size = numel * 4
    python_best, ctl_best = min(python_times), min(ctl_times)
    print(f"# {args.mib} MiB float32 read, best of {args.repeats}, one summond, "
          f"one rank, read-only session, python chunks of {args.chunk_kib} KiB")
    print(f"{'client':<34}{'time(ms)':>10}{'MiB/s':>10}")
    print(f"{'python summon.Client.read_tensor':<34}{python_best * 1e3:>10.1f}"
          f"{size / python_best / 2**20:>10.1f}")
    print(f"{'summonctl tensor read':<34}{ctl_best * 1e3:>10.1f}"
          f"{size / ctl_best / 2**20:>10.1f}")
    ratio = ctl_best / python_best
    print(f"python/summonctl rate ratio: {ratio:.2f} (target >= 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
