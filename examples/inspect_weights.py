#!/usr/bin/env python3
"""An inspector: looks at (and optionally edits) a running model's weights.

A separate process using only summon.Client, as a person watching a training
job would: it opens a session on a scope between two training steps, prints
each parameter's norm (computed where the data is) next to the norm of the
array it read (exit status 1 when they disagree), and with --scale
FQN=FACTOR multiplies one weight and closes with writeback, so the trainers'
next forward sees the edit.

    scripts/python examples/inspect_weights.py --model lm --scope blocks.0 \
        --scale blocks.0.fc.weight=0.5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))

import numpy as np  # noqa: E402

import summon  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="summond address (default $SUMMON_SERVER)")
    parser.add_argument("--tls-ca", help="PEM CA of a TLS summond's certificate")
    parser.add_argument("--token-file", help="bearer token file (default $SUMMON_TOKEN_FILE)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--scope", default="")
    parser.add_argument("--scale", metavar="FQN=FACTOR",
                        help="multiply one weight and write it back")
    args = parser.parse_args()
    edit = args.scale.split("=") if args.scale else None

    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as file:
            token = file.readline().strip()
    client = summon.Client(args.server, tls_ca=args.tls_ca, token=token)
    mismatches = 0
    try:
        with client.summon_full_params(args.model, scope=args.scope,
                                       writeback=edit is not None) as s:
            for stats in s.stats():
                norm = float(np.linalg.norm(s[stats.info.fqn].astype(np.float64)))
                print(f"{stats.info.fqn:<28} {stats.info.dtype:<9} "
                      f"{str(list(stats.info.shape)):<10} l2_norm {stats.l2_norm:.6f} "
                      f"(read back: {norm:.6f})")
                if abs(norm - stats.l2_norm) > 1e-9 * max(norm, 1.0):
                    mismatches += 1
            if edit is not None:
                fqn, factor = edit[0], float(edit[1])
                s[fqn] = s[fqn] * np.float32(factor)
                print(f"{fqn} *= {factor:g}: l2_norm now {s.stats(fqn)[0].l2_norm:.6f}")
        if edit is not None:
            result = s.close_result
            print(f"written back: {result.written_back} ({result.bytes_written} shard bytes)")
    except summon.SummonError as error:
        print(f"inspect_weights: {error.code}: {error.message}", file=sys.stderr)
        return 1
    if mismatches:
        print(f"inspect_weights: {mismatches} norm(s) computed by the daemon differ from "
              "the data read", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
