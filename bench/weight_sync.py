#!/usr/bin/env python3
"""Weight sync (issue 32) beside its anchors, in one run on this machine.

    bazel build //server:summond
    scripts/python bench/weight_sync.py            # 2 nodes x 2 ranks, a 117 M-param bf16 Llama shape
    scripts/python bench/weight_sync.py --preset 1b --iters 2 --skip-cow   # 1.0 B params, 2 GB
    scripts/python bench/weight_sync.py --preset 1b --iters 2 --skip-cow --nodes 1  # all local

A seeded bf16 Llama-shaped model (FULL_SHARD, W = 4 over 2 summond nodes, or
with --nodes 1 over one summond of 4 ranks) is published; readers on the
last node pull exactly their tensor-parallel slices (vLLM's rules: q/k/v,
gate/up and the embedding split by rows, o and down by columns, norms whole)
for TP = 1, 2, 4. Printed per TP:
  - bytes received from the other node per rank vs its slice bytes (goal
    <= 1.05x) and vs what the full-tensor approach (checkpoint-engine,
    veRL: every rank gets every full tensor) moves per rank;
  - the pull time of all TP ranks (one after the other; and TP readers at
    once) vs anchors timed in the same run (goal >= 0.5x): memcpy of the
    slice bytes, loopback TCP of the slice bytes, and "anchor": memcpy of
    the bytes the readers' node holds plus loopback TCP of those the other
    node sends (peer-recv), the best this host does with the same split (on
    1 node, memcpy alone); and vs the full-tensor path through summon itself
    (every TP rank reads every full tensor of the version, a unit per
    ReadSlices, and cuts its slice), for both deliveries: "shm" (the daemon
    writes into each rank's reused summon.SliceBuffer, as summon.sync.pull
    does) and "grpc" (the stream);
  - 8 concurrent readers of one version: unit copies per unit per version
    per node (goal 1, from /metrics) and their time vs one reader;
  - Publish's own cost (the trainer's stall), and the copy on write when a
    trainer's step comes while a version still refers to the live shards
    (2 nodes only: on one node the trainer's attach already copies them).
The trainer-step cost of publish_every=1 vs none is measured by
bench/weight_sync_steps.py.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client/python"))

import summon  # noqa: E402
from summon import SliceRequest  # noqa: E402
from summon.local import LocalDaemon  # noqa: E402


def create_when_joined(leader: summon.Client, layout: dict) -> None:
    """Creates the bench model ("llama", seeded 7) once every node joined."""
    for _ in range(600):
        try:
            leader.create_model("llama", layout, init="seeded:7")
            return
        except summon.SummonError as error:
            if error.code != "UNAVAILABLE":
                raise
            time.sleep(0.1)
    raise RuntimeError("the cluster did not form within 60 s")


def llama_layout(hidden: int, inter: int, layers: int, vocab: int, kv: int, heads: int) -> dict:
    head = hidden // heads

    def p(fqn: str, shape: list[int]) -> dict:
        return {"fqn": fqn, "shape": shape, "dtype": "bfloat16"}
    units = [{"fqn": "", "params": [p("embed_tokens.weight", [vocab, hidden]),
                                    p("norm.weight", [hidden]),
                                    p("lm_head.weight", [vocab, hidden])]}]
    for i in range(layers):
        n = f"layers.{i}"
        units.append({"fqn": n, "params": [
            p(f"{n}.q_proj.weight", [heads * head, hidden]),
            p(f"{n}.k_proj.weight", [kv * head, hidden]),
            p(f"{n}.v_proj.weight", [kv * head, hidden]),
            p(f"{n}.o_proj.weight", [hidden, heads * head]),
            p(f"{n}.gate_proj.weight", [inter, hidden]),
            p(f"{n}.up_proj.weight", [inter, hidden]),
            p(f"{n}.down_proj.weight", [hidden, inter]),
            p(f"{n}.input_layernorm.weight", [hidden]),
            p(f"{n}.post_attention_layernorm.weight", [hidden])]})
    return {"strategy": "FULL_SHARD", "units": units}


ROW_PARALLEL = ("o_proj", "down_proj")


def tp_requests(layout: dict, tp: int, rank: int) -> list[SliceRequest]:
    """Rank `rank`'s boxes under vLLM's TP rules (KV heads split while kv >= tp)."""
    out = []
    for unit in layout["units"]:
        for param in unit["params"]:
            shape = param["shape"]
            if len(shape) == 1:
                out.append(SliceRequest(param["fqn"], [(0, shape[0])]))
                continue
            dim = 1 if any(k in param["fqn"] for k in ROW_PARALLEL) else 0
            part = shape[dim] // tp
            box = [(0, shape[0]), (0, shape[1])]
            box[dim] = (rank * part, part)
            out.append(SliceRequest(param["fqn"], box))
    return out


def nbytes(requests: list[SliceRequest]) -> int:
    return sum(2 * int(np.prod([n for _, n in r.box])) for r in requests)


def packed_bytes(requests: list[SliceRequest]) -> int:
    """The ReadSlices answer: each entry 16-byte aligned."""
    return sum((2 * int(np.prod([n for _, n in r.box])) + 15) // 16 * 16 for r in requests)


PRESETS = {"1b": dict(hidden=2048, inter=5632, layers=20, vocab=32000, heads=32, kv_heads=4)}


def anchor_memcpy(size: int, iters: int) -> float:
    src = np.ones(size, np.uint8)
    dst = np.empty(size, np.uint8)
    dst[:] = 0
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def anchor_tcp(size: int, iters: int) -> float:
    """One loopback TCP connection, 1 MiB sends, received into a mapped buffer."""
    times = []
    data = memoryview(np.ones(size, np.uint8))
    into = memoryview(np.zeros(size, np.uint8))
    for _ in range(iters):
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]

        def send() -> None:
            with socket.create_connection(("127.0.0.1", port)) as s:
                for at in range(0, size, 1 << 20):
                    s.sendall(data[at:at + (1 << 20)])
                s.recv(1)
        sender = threading.Thread(target=send)
        start = time.perf_counter()
        sender.start()
        conn, _ = server.accept()
        got = 0
        while got < size:
            got += conn.recv_into(into[got:], min(1 << 20, size - got))
        conn.sendall(b"k")
        sender.join()
        times.append(time.perf_counter() - start)
        conn.close()
        server.close()
    return statistics.median(times)


def median_time(fn, iters: int) -> float:
    fn()  # warmup
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def metric(url: str, event: str, name: str = "events_total", label: str = "event") -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    match = re.search(r'summon_weight_sync_%s\{%s="%s"\} (\S+)' % (name, label, event), text)
    return float(match.group(1)) if match else float("nan")


def copy_on_write(leader: Any, metrics_url: str, units: int) -> tuple[float, float, float]:
    """Rank 0's optimizer step while versions 1 and 2 are kept and still
    refer to the live shards: its move into OPTIMIZER makes every node copy
    its ranks' units into both first (the leader's node in the move; node 1
    when the step's generations reach it). Returns the move's time, the time
    until node 1 holds its copies, and the same move once more with nothing
    left to copy (the baseline)."""
    lease = leader.attach("llama", [0], "bench-cow").lease_id

    def step(n: int) -> tuple[float, float]:
        for phase in ("FORWARD", "BETWEEN", "BACKWARD"):
            leader.report_phase("llama", 0, phase, step=n, lease_id=lease)
        before = metric(metrics_url, "unit_copies")
        start = time.perf_counter()
        leader.report_phase("llama", 0, "OPTIMIZER", step=n, lease_id=lease)
        moved = time.perf_counter() - start
        while n == 1 and metric(metrics_url, "unit_copies") < before + 2 * units:
            time.sleep(0.001)
        done = time.perf_counter() - start
        leader.report_phase("llama", 0, "IDLE", step=n, lease_id=lease)
        return moved, done

    moved, done = step(1)
    plain, _ = step(2)
    leader.detach(lease)
    return moved, done, plain


def copy_units(daemons: list, run: Path, nodes: int, units: int) -> None:
    """Makes every node copy each of its ranks' units into version 1: a
    trainer attaching announces it may write its ranks' shards (as the
    trainers' publish at a step's end copies the version ahead)."""
    ranks = 4 // nodes
    for node, daemon in enumerate(daemons):
        client = summon.Client(daemon.address, timeout=300)
        url = f"http://127.0.0.1:{(run / f'metrics{node}').read_text().strip()}/metrics"
        before = metric(url, "unit_copies")
        lease = client.attach("llama", list(range(node * ranks, (node + 1) * ranks)),
                              f"bench-copies-{node}").lease_id
        while metric(url, "unit_copies") < before + units:
            time.sleep(0.01)
        client.detach(lease)
    print(f"# version 1 read from copies: trainers attached to every rank after the publish")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--inter", type=int, default=2816)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="a model shape: 1b = hidden 2048, 20 layers, 32/4 heads, "
                             "intermediate 5632, vocab 32000 (1.0 B params)")
    parser.add_argument("--skip-cow", action="store_true",
                        help="skip the copy-on-write step (it copies two versions; "
                             "always skipped with --nodes 1)")
    parser.add_argument("--skip-full", action="store_true",
                        help="skip the full-tensor path (gather + cut)")
    parser.add_argument("--via", choices=("shm", "grpc"), action="append",
                        help="the deliveries to time (default both; repeatable)")
    parser.add_argument("--copied", action="store_true",
                        help="read version 1 from the nodes' own copies, as after a trainer's "
                             "publish at a step's end (copy ahead): trainers attach to every "
                             "rank right after the publish, which copies each unit into it")
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=2,
                        help="2: 2 summond x 2 ranks, half the bytes from the other node "
                             "(default); 1: 1 summond x 4 ranks, every byte local")
    args = parser.parse_args()
    for key, value in PRESETS.get(args.preset, {}).items():
        setattr(args, key, value)
    layout = llama_layout(args.hidden, args.inter, args.layers, args.vocab, args.kv_heads,
                          args.heads)
    params = sum(int(np.prod(p["shape"])) for u in layout["units"] for p in u["params"])
    run = Path(tempfile.mkdtemp(prefix="weight-sync-bench-"))
    daemons = []
    if args.nodes == 1:
        (run / "d0").mkdir()
        daemons.append(LocalDaemon(local_ranks=4, data_dir=str(run / "d0"), extra_args=[
            "--max-versions", "2", "--metrics-listen", "127.0.0.1:0",
            "--metrics-port-file", str(run / "metrics0")]).start())
    else:
        ports = []
        for _ in range(2):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
            s.close()
        nodes = ",".join(f"127.0.0.1:{p}" for p in ports)
        for node in range(2):
            (run / f"d{node}").mkdir()
            daemons.append(LocalDaemon(local_ranks=2, data_dir=str(run / f"d{node}"), extra_args=[
                "--nodes", nodes, "--coordinator", "static", "--node-rank", str(node),
                "--max-versions", "2",
                "--metrics-listen", "127.0.0.1:0",
                "--metrics-port-file", str(run / f"metrics{node}")]).start())
    try:
        leader = summon.Client(daemons[0].address, timeout=300)
        here = args.nodes - 1  # The readers' node: the last.
        reader = summon.Client(daemons[here].address, timeout=300)
        create_when_joined(leader, layout)
        metrics_url = f"http://127.0.0.1:{(run / f'metrics{here}').read_text().strip()}/metrics"
        shape = ("2 nodes x 2 ranks" if args.nodes == 2
                 else "1 node x 4 ranks (every byte local)")
        print(f"# weight_sync: {shape} (W = 4, FULL_SHARD), bf16 Llama shape "
              f"hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}: "
              f"{params / 1e6:.1f} M params, {2 * params / 2**20:.0f} MiB; readers on node {here}")
        print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        start = time.perf_counter()
        leader.publish("llama", 1)
        publish_s = time.perf_counter() - start
        print(f"# publish (every node records its live shards, copy on write): "
              f"{publish_s * 1e3:.1f} ms for {2 * params / 2**20:.0f} MiB "
              f"({2 * params / publish_s / 1e9:.2f} GB/s)")
        if args.copied:
            copy_units(daemons, run, args.nodes, len(layout["units"]))
        full_bytes = 2 * params
        print("#  TP  via   rank-slice(B)  peer-recv(B)  recv/slice  full-tensor recv(B)  "
              "pull-all(ms)  GB/s  memcpy(ms)  tcp(ms)  anchor(ms)  vs-memcpy  vs-tcp  "
              "vs-anchor  parallel(ms)  full-path(ms)")
        for tp in (1, 2, 4):
            requests = [tp_requests(layout, tp, r) for r in range(tp)]
            # One reused buffer per TP rank, as summon.sync.pull keeps one.
            buffers = [summon.SliceBuffer(packed_bytes(q)) for q in requests]
            stats = [reader.read_slices_with_stats("llama", 1, q, into=b)[1]
                     for q, b in zip(requests, buffers)]
            assert all(s.local_buffer for s in stats), "not delivered into shared memory"
            slice_bytes = sum(s.slice_bytes for s in stats)
            peer = sum(s.peer_bytes for s in stats)
            # Full tensors to every rank: the other nodes' share of every tensor, per rank.
            full_recv = full_bytes * (args.nodes - 1) // args.nodes
            t_mem = anchor_memcpy(slice_bytes, args.iters)
            t_tcp = anchor_tcp(slice_bytes, args.iters)
            # The mixed anchor: what this host does at best with the same
            # split, memcpy of the bytes the readers' node holds and loopback
            # TCP of those the other node sends.
            # With every byte on one side it is that column's own time.
            local = slice_bytes - peer
            t_anchor = ((t_mem if peer == 0 else anchor_memcpy(local, args.iters) if local else 0.0)
                        + (t_tcp if local == 0 else anchor_tcp(peer, args.iters) if peer else 0.0))

            def full_path() -> None:
                # Every TP rank receives every full tensor (a unit per
                # ReadSlices, whole boxes) and cuts its slice: what
                # checkpoint-engine and veRL do, through summon's own reads.
                for q in requests:
                    for unit in layout["units"]:
                        whole = [SliceRequest(p["fqn"], [(0, n) for n in p["shape"]])
                                 for p in unit["params"]]
                        arrays = dict(zip((w.fqn for w in whole),
                                          reader.read_slices("llama", 1, whole)))
                        for r in q:
                            if r.fqn in arrays:
                                np.ascontiguousarray(arrays[r.fqn][
                                    tuple(slice(a, a + n) for a, n in r.box)])
            t_full = float("nan") if args.skip_full else median_time(full_path, 1)
            for via in args.via or ("shm", "grpc"):
                shm = via == "shm"

                def read(rank: int) -> None:
                    reader.read_slices("llama", 1, requests[rank],
                                       into=buffers[rank] if shm else None, local=shm)

                def pull_all() -> None:
                    for rank in range(tp):
                        read(rank)

                def pull_parallel() -> None:
                    with ThreadPoolExecutor(tp) as pool:
                        list(pool.map(read, range(tp)))
                before = dict(reader.slice_deliveries)
                t_pull = median_time(pull_all, args.iters)
                t_par = median_time(pull_parallel, args.iters)
                other = "stream" if shm else "local_buffer"
                assert reader.slice_deliveries.get(other, 0) == before.get(other, 0), via
                print(f"{tp:5d} {via:>4} {slice_bytes // tp:13d} {peer // tp:13d} "
                      f"{peer / max(slice_bytes, 1):10.3f}  {full_recv:19d} {t_pull * 1e3:13.1f} "
                      f"{slice_bytes / t_pull / 1e9:5.2f} {t_mem * 1e3:11.1f} {t_tcp * 1e3:8.1f} "
                      f"{t_anchor * 1e3:11.1f} {t_mem / t_pull:10.2f} {t_tcp / t_pull:7.2f} "
                      f"{t_anchor / t_pull:10.2f} {t_par * 1e3:13.1f} "
                      f"{t_full * 1e3:14.1f}", flush=True)
            for buffer in buffers:
                buffer.close()
            del buffers
        # 8 readers of one fresh version.
        leader.publish("llama", 2)
        copies_before = metric(metrics_url, "unit_copies")
        requests = tp_requests(layout, 8, 0)
        one = median_time(lambda: reader.read_slices("llama", 2, requests), args.iters)

        def eight() -> None:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda r: reader.read_slices("llama", 2, tp_requests(layout, 8, r)),
                              range(8)))
        t8 = median_time(eight, args.iters)
        copies = metric(metrics_url, "unit_copies") - copies_before
        units = len(layout["units"])
        print(f"# 8 readers (TP = 8) of version 2 on node {here}: {t8 * 1e3:.1f} ms vs one "
              f"reader's {one * 1e3:.1f} ms ({t8 / one:.2f}x for 8x the readers); unit copies on "
              f"node {here} while they read: {copies:.0f} (copy on write: none until a writer "
              f"comes, {units} units, none per reader)")
        cow_bytes = metric(metrics_url, "versions", "version_bytes", "kind")
        # On one node the trainer's attach already copies the live units into
        # both versions (seen at 22:30 UTC on 2026-11-28), so the move this
        # step times copies nothing there: skipped.
        moved, done, plain = ((float("nan"),) * 3 if args.skip_cow or args.nodes == 1
                              else copy_on_write(leader, metrics_url, units))
        cow_bytes = metric(metrics_url, "versions", "version_bytes", "kind") - cow_bytes
        print(f"# copy on write: rank 0's move into OPTIMIZER with versions 1 and 2 live: "
              f"{moved * 1e3:.1f} ms, node {here}'s {cow_bytes / 2**20:.0f} MiB copied after "
              f"{done * 1e3:.1f} ms ({cow_bytes / done / 1e9:.2f} GB/s); the same move with "
              f"nothing live {plain * 1e3:.1f} ms")
        print(f"# node {here} totals: versions {metric(metrics_url, 'versions'):.0f}, unit copies "
              f"{metric(metrics_url, 'unit_copies'):.0f}, reads {metric(metrics_url, 'reads'):.0f},"
              f" peer bytes received {metric(metrics_url, 'peer_bytes_received'):.0f}")
        print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        for daemon in daemons:
            daemon.close()


if __name__ == "__main__":
    main()
