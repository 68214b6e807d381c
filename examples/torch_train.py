#!/usr/bin/env python3
"""Trains a small transformer on summond's shards and checks it against plain torch.

W torch.distributed processes (gloo, CPU) train a small transformer-like
model (token embedding, 2 blocks, a head tied to the embedding) FSDP-style,
and the flat shards they train ARE summond's shared-memory shards:

- rank 0 registers the model (layout from the nn.Module, init external),
  every rank writes its shard from the module's initial values, and the
  model is marked initialised (summon.torch.Trainer.init_from_module);
- each forward all-gathers a unit's flat shards into the full flat parameter
  and computes with views of it; FULL_SHARD frees it again and re-gathers in
  backward (activation checkpointing per block), SHARD_GRAD_OP keeps it;
- backward reduce-scatters the gradients into the rank's grads segment
  (torch 1.13's gloo has no reduce_scatter: all_reduce, then each rank keeps
  its chunk); the optimizer (SGD with momentum, or Adam) steps in place on the
  shard in shared memory;
- each step reports FORWARD, BETWEEN, BACKWARD, OPTIMIZER and IDLE.

With --edit-at K an inspector process (examples/inspect_weights.py, only
summon.Client) halves one weight with writeback after step K; the trainers
see it in their next forward (and hear of it through the external-write
callback). With --restart-at K summond is restarted after step K; the
trainers' views stay valid and training goes on. The same model trained in
this one process without summon (same init, same data, the same edit) is the
reference: per-step losses and final parameters must agree within --rtol.

With --nodes N the ranks live on a cluster of N summond processes (node 0
leads), W/N ranks each, and every trainer talks to its own node. With
--stop-leader-at K the leader (or, with --stop-node N, node N) is stopped
(SIGSTOP) for --stop-seconds right after step K while training goes on: the
trainers' phase reports fail fast, their steps go on (the shards are in
their node's memory) and their phases are re-established once the node runs
again; each rank records when its steps ended (`step_ends`, beside the
stop's `stop_window`, and how long its phase reports held each step,
`report_seconds`); with --cut the network between the nodes is cut for as
long instead (TCP proxies between them black-hole it). --wait S: steps wait
up to S s for a writable session
(R3; default none). With --restart-nodes-at K a follower and then the
leader are restarted between two steps.

    scripts/python examples/torch_train.py --world-size 2
    scripts/python examples/torch_train.py --world-size 2 --nodes 2 --stop-leader-at 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client" / "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import summon  # noqa: E402
import summon.torch as st  # noqa: E402
from summon.local import LinkProxy, LocalDaemon  # noqa: E402
from tiny_lm import BATCH, ShardedLM, TinyLM, batch, loss_of, make_optimizer  # noqa: E402

EDITED, EDITED_UNIT = "blocks.0.fc.weight", "blocks.0"
EDIT_FACTOR = 0.5


def wait_for_file(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout} s")
        time.sleep(0.02)


def train_worker(args: argparse.Namespace) -> None:
    """One rank: attach, init from the module, train --steps steps on the shards."""
    rank, world = args.rank, args.world_size
    run_dir = Path(args.run_dir)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{run_dir}/pg-store",
                            rank=rank, world_size=world)
    client = summon.Client(args.server)
    results = []
    for strategy in args.strategies:
        name = model_name(strategy)
        module = TinyLM(args.seed)
        if rank == 0:
            layout = st.layout_from_module(module, module.blocks, strategy)
            client.create_model(name, layout, init="external", grad_ranks="all")
            if args.watch:  # from outside, as an operator would: every step
                subprocess.run([args.watch, "--server", args.server, "watch", "add",
                                name, "--every", "1"], check=True)
        dist.barrier()
        edits: list[dict] = []
        step_now = [0]

        def on_external_write(trainer: st.Trainer, units: list[summon.UnitGeneration]) -> None:
            # An inspector changed these units: state derived from them (an fp32
            # master copy, a cached unsharded parameter) would be refreshed here.
            # SGD's momentum and Adam's moments stay, as in the reference run.
            edits.append({"step": step_now[0], "units": sorted(u.unit for u in units)})

        trainer = st.attach(client, name, [rank], on_external_write=on_external_write,
                            wait=args.wait)
        trainer.init_from_module(module, mark_initialized=False)
        dist.barrier()
        if rank == 0:
            trainer.mark_initialized()
        dist.barrier()

        views = trainer.shard_views(rank)
        sharded = ShardedLM(module, views, strategy)
        optimizer = make_optimizer(args.optimizer, list(sharded.leaves.values()))
        rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        losses, views_valid, step_ends, report_seconds = [], None, [], []
        for step in range(1, args.steps + 1):
            step_now[0] = step
            inputs, targets = batch(step)
            held = trainer.report_seconds
            with trainer.step(step) as phases:           # FORWARD
                optimizer.zero_grad(set_to_none=False)   # the grads segment, in place
                loss = loss_of(sharded(inputs[rows]), targets[rows])
                phases.backward()                        # BETWEEN, BACKWARD
                loss.backward()
                phases.optimizer()                       # OPTIMIZER
                optimizer.step()
            step_ends.append(time.time())
            # How long this step's phase reports held this rank (R24).
            report_seconds.append(trainer.report_seconds - held)
            total = loss.detach().clone()                # IDLE again
            dist.all_reduce(total)
            losses.append(total.item() / world)
            if step == args.edit_at:
                # summond refuses sessions while it does not know where the
                # ranks are (after a restart or an outage): let it hear them.
                settle(trainer)
                dist.barrier()
                if rank == 0:
                    with open(run_dir / f"inspector-{name}.txt", "w") as out:
                        subprocess.run([sys.executable, str(REPO / "examples/inspect_weights.py"),
                                        "--server", args.server, "--model", name,
                                        "--scope", EDITED_UNIT,
                                        "--scale", f"{EDITED}={EDIT_FACTOR}"],
                                       check=True, stdout=out)
                dist.barrier()
            if step in (args.restart_at, args.restart_nodes_at):
                dist.barrier()
                if rank == 0:
                    (run_dir / f"restart-{name}").touch()
                    wait_for_file(run_dir / f"restarted-{name}")
                dist.barrier()
                views_valid = views_survive(client, name, rank, views)
            if step == args.stop_leader_at:
                # Every rank starts the next step with the node stopped (one
                # mid-step meets it at a later move: docs/operations.md).
                # Training does not wait for the node to come back.
                dist.barrier()
                if rank == 0:
                    (run_dir / f"stop-{name}").touch()
                    wait_for_file(run_dir / f"stopped-{name}")
                dist.barrier()
        reestablished = settle(trainer)  # before leaving, summond knows the ranks
        trainer.detach()
        results.append({"strategy": strategy, "losses": losses, "external_edits": edits,
                        "views_valid_after_restart": views_valid,
                        "outages": trainer.outages, "reestablished": reestablished,
                        "step_ends": step_ends, "report_seconds": report_seconds})
        dist.barrier()
    (run_dir / f"worker{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def settle(trainer: st.Trainer, timeout: float = 60.0) -> bool:
    """Waits until the trainer re-established its phases (see st.Trainer)."""
    deadline = time.monotonic() + timeout
    while trainer.interlock_unknown and time.monotonic() < deadline:
        time.sleep(0.05)
    return not trainer.interlock_unknown


def views_survive(client: summon.Client, name: str, rank: int, views: st.ShardViews) -> bool:
    """Whether the mapping made before the restart still is the model's shard."""
    fresh = st.ShardViews(client.map_shards(name, rank))
    return (fresh.map.segment_name == views.map.segment_name
            and fresh.map.incarnation == views.map.incarnation
            and all(torch.equal(fresh[u.unit].params, u.params.detach()) for u in views))


# The launcher and the unsharded reference ------------------------------------


def model_name(strategy: str) -> str:
    return "tiny-" + strategy.lower().replace("_", "-")


def train_reference(args: argparse.Namespace) -> tuple[list[float], TinyLM]:
    """The same training in this one process with plain torch parameters."""
    torch.set_num_threads(1)
    module = TinyLM(args.seed)
    optimizer = make_optimizer(args.optimizer, list(module.parameters()))
    losses = []
    for step in range(1, args.steps + 1):
        inputs, targets = batch(step)
        optimizer.zero_grad(set_to_none=False)
        loss = loss_of(module(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step == args.edit_at:
            with torch.no_grad():
                dict(module.named_parameters())[EDITED].mul_(EDIT_FACTOR)
    return losses, module


def relative(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return float(np.max(np.abs(a - b))) / max(scale, 1e-30) if a.size else 0.0


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_daemons(args: argparse.Namespace, run_dir: Path,
                  links: list[LinkProxy]) -> list[LocalDaemon]:
    """One summond, or with --nodes N a cluster of N (node 0 leads); with
    --cut the links between the nodes go through `links` (filled here)."""
    if args.nodes == 1:
        daemon = LocalDaemon(local_ranks=args.world_size, data_dir=str(run_dir / "data"),
                             unix_socket=str(run_dir / "summond.sock"))
        os.makedirs(daemon.data_dir)
        return [daemon.start()]
    ports = free_ports(args.nodes)
    # With --cut every node reaches the others through a proxy (its --nodes
    # list names the proxies; its own entry is where it listens), so the
    # launcher can black-hole the links between nodes and nothing else.
    if args.cut:
        links += [LinkProxy(port) for port in ports]
    daemons = []
    for node in range(args.nodes):
        nodes = ",".join(f"127.0.0.1:{port if other == node or not links else links[other].port}"
                         for other, port in enumerate(ports))
        daemon = LocalDaemon(local_ranks=args.world_size // args.nodes,
                             data_dir=str(run_dir / f"data{node}"),
                             extra_args=["--nodes", nodes, "--coordinator", "static",
                                         "--node-rank", str(node),
                                         *(["--heartbeat-ms", str(args.heartbeat_ms)]
                                           if args.heartbeat_ms else [])])
        os.makedirs(daemon.data_dir)
        daemons.append(daemon.start())
    wait_ready(daemons[0])
    return daemons


def wait_ready(daemon: LocalDaemon, timeout: float = 60.0) -> None:
    """Until the cluster answers calls (every node joined)."""
    deadline = time.monotonic() + timeout
    with summon.Client(daemon.address, timeout=5) as client:
        while True:
            try:
                client.list_models()
                return
            except summon.SummonError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def serve_request(args: argparse.Namespace, daemons: list[LocalDaemon],
                  links: list[LinkProxy], run_dir: Path, request: Path) -> None:
    """A rank asked for a restart or for the leader to be stopped."""
    kind, name = request.name.split("-", 1)
    request.unlink()
    if kind == "restart" and len(daemons) == 1:
        print(f"[launcher] restarting summond after step {args.restart_at} of {name}",
              flush=True)
        daemons[0].restart()
    elif kind == "restart":
        print(f"[launcher] restarting node 1, then the leader, after step "
              f"{args.restart_nodes_at} of {name}", flush=True)
        for node in (1, 0):
            daemons[node].restart()
        wait_ready(daemons[0])
    elif args.cut:
        print(f"[launcher] cutting the network between the nodes for {args.stop_seconds} s "
              f"after step {args.stop_leader_at} of {name}", flush=True)
        for link in links:
            link.cut()
        window = [time.time()]
        (run_dir / f"stopped-{name}").touch()
        time.sleep(args.stop_seconds)
        window.append(time.time())
        for link in links:
            link.heal()
        (run_dir / f"window-{name}.json").write_text(json.dumps(window))
        return
    else:
        stopped = daemons[args.stop_node].process
        assert stopped is not None
        print(f"[launcher] stopping node {args.stop_node} for {args.stop_seconds} s after "
              f"step {args.stop_leader_at} of {name}", flush=True)
        stopped.send_signal(signal.SIGSTOP)
        window = [time.time()]
        (run_dir / f"stopped-{name}").touch()
        time.sleep(args.stop_seconds)
        window.append(time.time())
        stopped.send_signal(signal.SIGCONT)
        (run_dir / f"window-{name}.json").write_text(json.dumps(window))
        return
    (run_dir / f"restarted-{name}").touch()


def run_workers(args: argparse.Namespace, daemons: list[LocalDaemon],
                links: list[LinkProxy], run_dir: Path) -> None:
    """Starts the W ranks and serves their requests until they finish."""
    procs = []
    per_node = args.world_size // len(daemons)
    for rank in range(args.world_size):
        command = [sys.executable, __file__, "--worker", "--rank", str(rank),
                   "--run-dir", str(run_dir), "--server", daemons[rank // per_node].address,
                   "--world-size", str(args.world_size), "--steps", str(args.steps),
                   "--strategy", ",".join(args.strategies), "--optimizer", args.optimizer,
                   "--seed", str(args.seed), "--edit-at", str(args.edit_at),
                   "--restart-at", str(args.restart_at),
                   "--restart-nodes-at", str(args.restart_nodes_at),
                   "--stop-leader-at", str(args.stop_leader_at),
                   *(["--wait", str(args.wait)] if args.wait is not None else []),
                   *(["--watch", args.watch] if args.watch else [])]
        log = open(run_dir / f"worker{rank}.log", "wb")
        procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + args.timeout
    try:
        while any(p.poll() is None for p in procs):
            for request in [*run_dir.glob("restart-*"), *run_dir.glob("stop-*")]:
                serve_request(args, daemons, links, run_dir, request)
            if any(p.returncode not in (None, 0) for p in procs):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the workers did not finish in {args.timeout} s")
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for daemon in daemons:  # never leave a node stopped, or cut off
            if daemon.process is not None:
                daemon.process.send_signal(signal.SIGCONT)
        for link in links:
            link.heal()
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    if failed:
        for rank in failed:
            sys.stderr.write(f"--- worker {rank} (exit {procs[rank].returncode}):\n"
                             + (run_dir / f"worker{rank}.log").read_text()[-4000:])
        raise RuntimeError(f"workers {failed} failed")


def compare(args: argparse.Namespace, client: summon.Client, strategy: str,
            worker_results: list[dict], reference: tuple[list[float], TinyLM],
            run_dir: Path) -> dict:
    """Per-step losses and the model's final parameters (read through a
    session, as an inspector would) against the unsharded reference."""
    name = model_name(strategy)
    if args.edit_at:
        print(f"\n[inspector after step {args.edit_at}]\n"
              + (run_dir / f"inspector-{name}.txt").read_text().rstrip())
    ref_losses, ref_module = reference
    losses = worker_results[0]["losses"]
    loss_rel = [abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)]
    param_rel = {}
    with client.summon_full_params(name, writeback=False) as s:
        for fqn, param in ref_module.named_parameters():
            param_rel[fqn] = relative(s[fqn], param.detach().numpy())
    print(f"\n{strategy}, W={args.world_size}, {args.optimizer}: per-step loss, "
          f"summon shards vs one plain torch process")
    print(f"{'step':>4}  {'summon':>12}  {'reference':>12}  {'rel.diff':>9}")
    for step, (a, b, r) in enumerate(zip(losses, ref_losses, loss_rel), start=1):
        notes = []
        if step == args.edit_at:
            notes.append(f"then inspector: {EDITED} *= {EDIT_FACTOR}")
        if step == args.restart_at:
            notes.append("then summond restarted")
        if step == args.restart_nodes_at:
            notes.append("then node 1 and the leader restarted")
        if step == args.stop_leader_at:
            notes.append(f"then node {args.stop_node} stopped for {args.stop_seconds} s")
        print(f"{step:>4}  {a:>12.7f}  {b:>12.7f}  {r:>9.1e}  {'; '.join(notes)}")
    worst = max(param_rel, key=param_rel.get)
    print(f"final parameters: {len(param_rel)} tensors, max relative difference "
          f"{param_rel[worst]:.1e} ({worst})")
    edits = [w["external_edits"] for w in worker_results]
    if args.edit_at:
        print(f"external-write callback on every rank: {edits[0]}")
    ok = max(loss_rel) <= args.rtol and param_rel[worst] <= args.rtol
    outages = [w["outages"] for w in worker_results]
    reestablished = [w["reestablished"] for w in worker_results]
    if args.stop_leader_at or args.restart_nodes_at:
        print(f"summond unreachable during a step (per rank): {outages}; phases "
              f"re-established: {reestablished}")
    ok = ok and all(reestablished)
    stop_window = None
    if args.stop_leader_at:
        stop_window = json.loads((run_dir / f"window-{name}.json").read_text())
        print(f"steps ended (s after the {'cut' if args.cut else 'stop'} began, per rank): "
              + "; ".join(", ".join(f"{end - stop_window[0]:+.2f}" for end in w["step_ends"])
                          for w in worker_results)
              + f"; it ended at +{stop_window[1] - stop_window[0]:.2f}")
        print("s in phase reports per step (per rank): "
              + "; ".join(", ".join(f"{held:.2f}" for held in w["report_seconds"])
                          for w in worker_results))
    if args.restart_at or args.restart_nodes_at:
        valid = [w["views_valid_after_restart"] for w in worker_results]
        print(f"views made before the restart still the shards after it: {valid}")
        ok = ok and all(valid)
    return {"strategy": strategy, "world_size": args.world_size, "optimizer": args.optimizer,
            "losses": losses, "reference_losses": ref_losses,
            "max_loss_rel": max(loss_rel), "param_rel": param_rel,
            "max_param_rel": param_rel[worst], "external_edits": edits,
            "views_valid_after_restart": [w["views_valid_after_restart"]
                                          for w in worker_results],
            "outages": outages, "reestablished": reestablished,
            "step_ends": [w["step_ends"] for w in worker_results],
            "report_seconds": [w["report_seconds"] for w in worker_results],
            "stop_window": stop_window, "ok": ok}


def show_watches(summonctl: str, client: summon.Client, address: str) -> None:
    """`summonctl watch show` of each watched model's first parameter."""
    for watch in client.list_watches():
        print(f"\n[watch of {watch.model}: {len(watch.watched)} parameters, "
              f"last step {watch.last_step}]", flush=True)
        subprocess.run([summonctl, "--server", address, "watch", "show", watch.model,
                        watch.watched[0]], check=True)


def launch(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="torch-train-") as tmp:
        run_dir = Path(tmp)
        links: list[LinkProxy] = []
        daemons = start_daemons(args, run_dir, links)
        try:
            print(f"[launcher] {len(daemons)} summond, {args.world_size // len(daemons)} "
                  f"local ranks each, at {', '.join(d.address for d in daemons)}; "
                  f"{args.world_size} gloo trainers, "
                  f"{args.steps} steps of {', '.join(args.strategies)}", flush=True)
            started = time.monotonic()
            run_workers(args, daemons, links, run_dir)
            elapsed = time.monotonic() - started
            per_rank = [json.loads((run_dir / f"worker{r}.json").read_text())
                        for r in range(args.world_size)]
            reference = train_reference(args)
            # Sessions work again (after a stop or restarts): the final
            # parameters are read through one.
            client = summon.Client(daemons[0].address)
            runs = [compare(args, client, strategy, [w[i] for w in per_rank], reference,
                            run_dir)
                    for i, strategy in enumerate(args.strategies)]
            if args.watch:
                show_watches(args.watch, client, daemons[0].address)
            client.close()
        finally:
            for daemon in daemons:  # the leader first: it deletes everywhere
                daemon.close()
            for link in links:
                link.close()
    ok = all(run["ok"] for run in runs)
    print(f"\ntrainers ran {elapsed:.1f} s; tolerance {args.rtol:g} relative: "
          f"{'MATCH' if ok else 'MISMATCH'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"ok": ok, "runs": runs}, indent=1))
    return 0 if ok else 1


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--strategy", default="FULL_SHARD",
                        help="FULL_SHARD, SHARD_GRAD_OP, or both comma-separated")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--edit-at", type=int, default=0, metavar="K",
                        help=f"after step K an inspector halves {EDITED}")
    parser.add_argument("--restart-at", type=int, default=0, metavar="K",
                        help="after step K summond is restarted")
    parser.add_argument("--nodes", type=int, default=1,
                        help="summond processes (a cluster; W must be a multiple)")
    parser.add_argument("--stop-leader-at", type=int, default=0, metavar="K",
                        help="after step K the leader is stopped (SIGSTOP) while "
                             "training goes on")
    parser.add_argument("--stop-seconds", type=float, default=5.0)
    parser.add_argument("--stop-node", type=int, default=0, metavar="N",
                        help="the node --stop-leader-at stops (0: the leader)")
    parser.add_argument("--heartbeat-ms", type=int, default=0, metavar="MS",
                        help="summond's --heartbeat-ms on a cluster (a node silent "
                             "for 3 heartbeats is declared failed); 0: its default")
    parser.add_argument("--cut", action="store_true",
                        help="with --stop-leader-at and --nodes 2: cut the network "
                             "between the nodes (TCP proxies black-hole it) instead "
                             "of stopping one")
    parser.add_argument("--wait", type=float, default=None, metavar="S",
                        help="seconds a step waits for a writable session (R3)")
    parser.add_argument("--restart-nodes-at", type=int, default=0, metavar="K",
                        help="after step K node 1 and then the leader restart "
                             "(--nodes 2 or more)")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--watch", metavar="SUMMONCTL",
                        help="add a watch of every parameter (every step) with this "
                             "summonctl before training, and show one after")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.strategies = [s.strip().upper() for s in args.strategy.split(",") if s.strip()]
    if args.worker:
        train_worker(args)
        return 0
    if args.world_size % args.nodes or ((args.restart_nodes_at or args.cut)
                                        and args.nodes < 2):
        parser.error("--world-size must be a multiple of --nodes; --restart-nodes-at "
                     "and --cut need --nodes 2 or more")
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
