"""What summon's integrations cost each framework's training step (issue 35).

    scripts/python bench/integrations_overhead.py [--steps 6] [--rounds 2] [--json OUT]
        [--before-daemon SUMMOND]

Starts a summond (LocalDaemon) and W = 2 gloo ranks on the CPU; each rank
trains a Llama of about 7 M parameters with FSDP2 under each framework in
turn (the Hugging Face Trainer, Accelerate, Lightning's
ModelParallelStrategy; torchtitan's own debugmodel, 6.2 M), alternating blocks of steps without and with the
integration in the same run (plain, served, served, plain, ...), so both see
the same machine load. A block builds the framework's trainer afresh; its
first two steps are warm-up and not timed. Each step is timed from the
framework's step-begin event to its step-end event (the Accelerate loop:
forward to zero_grad). On a CPU accelerate and the Trainer are forced to FSDP
as the tests do (tests/integrations/worker.py's force_fsdp_state, imported
from there). Prints each framework's median step time both ways and the
ratio plain/served (1.0 = no cost), and the time spent inside summon's
integration per step (every Served event method and hook, timed where it is
entered from the framework): on a loaded machine the two medians swing by
tens of percent between runs, while this figure is what the integration
itself adds to a step, and the phase reports the training thread waited
for (calls and milliseconds per step, per phase). --before-daemon SUMMOND
starts a second summond from that binary (e.g. built at an earlier commit)
and adds, every round, served blocks against it: before and after beside
the same plain blocks. --before-calls adds instead served blocks against the
same summond whose client makes the calls of before issue 35c: BETWEEN and
BACKWARD as two calls, BETWEEN reported at the forward's end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(REPO / "tests" / "integrations"))

WARMUP = 2
# Served's entry points from a framework: its module and optimizer hooks and
# the event methods the callbacks call.
HOOKS = ("_pre_forward", "_post_forward", "_backward_starts", "_backward_ends",
         "_pre_step", "_post_step", "begin_step", "end_forward", "begin_backward",
         "end_backward", "begin_optimizer_step", "end_step")
# The served blocks now running: "served", or "before" (--before-daemon).
served_mode = ["served"]
# Per mode: seconds inside summon, steps that ran served.
hook_seconds: dict[str, list] = {}
# Per mode, phase reports the training thread waited for: phase -> [calls,
# seconds] (Client.report_phase, one per rank and move; R3 slices count once).
report_calls: dict[str, dict[str, list]] = {}


def time_integration() -> None:
    """Wraps Served's entry points (before any serve binds them) to add the
    seconds spent inside them, outermost calls only, to hook_seconds."""
    from summon.serve import Served
    depth = [0]

    def timed(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    hook_seconds.setdefault(served_mode[0], [0.0, 0])[0] += (
                        time.perf_counter() - start)
        return wrapper

    for name in HOOKS:
        setattr(Served, name, timed(getattr(Served, name)))

    import threading

    from summon.client import Client
    report_phase = Client.report_phase

    def counted(self: Any, model: str, rank: int, phase: str, *args: Any,
                **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return report_phase(self, model, rank, phase, *args, **kwargs)
        finally:
            # A deferred BETWEEN reported alone (summon.phases.DEFER_SECONDS)
            # comes from a background thread: counted apart, not waited for.
            key = phase if threading.current_thread() is threading.main_thread() else (
                "alone:" + phase)
            entry = report_calls.setdefault(served_mode[0], {}).setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    Client.report_phase = counted


def emulate_separate_calls() -> None:
    """In "before" blocks (--before-calls), the client's calls before issue
    35c: a deferred BETWEEN reported at once, a combined report sent as two."""
    from summon.client import Client
    from summon.phases import PhaseKeeper
    report_phase, defer = Client.report_phase, PhaseKeeper.defer

    def separate(self: Any, model: str, rank: int, phase: str, *args: Any,
                 through: Any = None, **kwargs: Any) -> Any:
        if through is not None and served_mode[0] == "before":
            lease_id = args[2] if len(args) > 2 else kwargs.get("lease_id", "")
            report_phase(self, model, rank, through, lease_id=lease_id,
                         timeout=kwargs.get("timeout"))
            through = None
        return report_phase(self, model, rank, phase, *args, through=through, **kwargs)

    def at_once(self: Any, phase: str) -> None:
        if served_mode[0] == "before":
            self.report(phase, None, None)
        else:
            defer(self, phase)

    Client.report_phase = separate
    PhaseKeeper.defer = at_once


def llama() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=128))


def batches(count: int) -> list:
    import torch
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, 8192, (64,), generator=generator) for _ in range(count)]


def hf_block(steps: int, client: Any) -> list[float]:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from summon.integrations.hf import SummonCallback
    from worker import force_fsdp_state
    force_fsdp_state()
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            times.append(time.perf_counter() - self.start)

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="summon-bench-hf-"), max_steps=steps + WARMUP,
        per_device_train_batch_size=4, report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True, use_cpu=torch.cuda.device_count() == 0,
        fsdp=True, fsdp_config={"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})
    data = [{"input_ids": t, "labels": t} for t in batches(8 * (steps + WARMUP))]
    callbacks = [SummonCallback("bench-hf", client=client)] if client else []
    Trainer(model=llama(), args=args, train_dataset=data,
            callbacks=callbacks + [Clock()]).train()
    return times[WARMUP:]


def accelerate_block(steps: int, client: Any) -> list[float]:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin

    from summon.integrations import accelerate as summon_accelerate
    from worker import force_fsdp_state
    force_fsdp_state()
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["LlamaDecoderLayer"])
    accelerator = Accelerator(cpu=torch.cuda.device_count() == 0, fsdp_plugin=plugin)
    model = llama()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    serving = (summon_accelerate.serve(accelerator, model, "bench-acc", optimizer=optimizer,
                                       client=client) if client else None)
    times = []
    data = batches(4 * (steps + WARMUP))
    for step in range(steps + WARMUP):
        ids = torch.stack(data[4 * step:4 * step + 4])
        start = time.perf_counter()
        accelerator.backward(model(input_ids=ids, labels=ids).loss)
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    if serving is not None:
        serving.close()
    return times[WARMUP:]


def lightning_block(steps: int, client: Any) -> list[float]:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.strategies import ModelParallelStrategy
    from torch.distributed.fsdp import fully_shard

    from summon.integrations.lightning import SummonCallback
    times: list[float] = []

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = llama()

        def configure_model(self) -> None:
            mesh = self.device_mesh["data_parallel"]
            for layer in self.model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(self.model, mesh=mesh)

        def training_step(self, batch: Any, index: int) -> Any:
            return self.model(input_ids=batch, labels=batch).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters())

    class Clock(pl.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            self.start = time.perf_counter()

        def on_train_batch_end(self, *args: Any) -> None:
            times.append(time.perf_counter() - self.start)

    callbacks = [SummonCallback("bench-pl", client=client)] if client else []
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, max_steps=steps + WARMUP, logger=False,
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=callbacks + [Clock()])
    data = torch.utils.data.DataLoader(batches(8 * (steps + WARMUP)), batch_size=4)
    trainer.fit(Module(), data)
    return times[WARMUP:]


def torchtitan_block(steps: int, client: Any) -> list[float]:
    """torchtitan's Llama3 debugmodel (6.2 M parameters) through its own
    parallelize_llama, built as tests/integrations/titan.py builds it (with
    its CPU workarounds), served by the documented hook."""
    import titan
    import torch
    import torch.distributed as dist
    from torchtitan.distributed.spmd_types import annotate_input_spmd_types

    import summon.torch as st
    model, optimizers, (context, parallel_dims) = titan.build(dist.get_world_size())
    serving = (st.serve(model, "bench-titan", optimizer=optimizers, client=client)
               if client else None)
    times = []
    for step in range(steps + WARMUP):
        tokens = torch.cat([titan.batch(step, dist.get_rank() + 2 * i) for i in range(2)])
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        start = time.perf_counter()
        with context():
            inputs, labels, extra = annotate_input_spmd_types(
                parallel_dims, inputs, labels,
                {"positions": torch.arange(titan.SEQ).expand(inputs.shape[0], titan.SEQ)})
            logits = model(inputs, **extra)
            torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                              labels.flatten()).backward()
        optimizers.step()
        optimizers.zero_grad()
        times.append(time.perf_counter() - start)
    if serving is not None:
        serving.close()
    return times[WARMUP:]


BLOCKS: dict[str, Callable[[int, Any], list[float]]] = {
    "hf": hf_block, "accelerate": accelerate_block, "lightning": lightning_block,
    "torchtitan": torchtitan_block}


def rank_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from summon.client import Client
    dist.init_process_group("gloo")
    time_integration()
    if args.before_calls:  # after: each of its calls is counted
        emulate_separate_calls()
    clients = {"served": Client(os.environ["SUMMON_SERVER"])}
    if os.environ.get("SUMMON_SERVER_BEFORE"):
        clients["before"] = Client(os.environ["SUMMON_SERVER_BEFORE"])
    elif args.before_calls:
        clients["before"] = Client(os.environ["SUMMON_SERVER"])
    modes = ["plain"] + list(clients)
    timings: dict[str, dict[str, Any]] = {}
    for name in args.frameworks.split(","):
        timings[name] = {mode: [] for mode in modes}
        hook_seconds.clear()
        report_calls.clear()
        for round_ in range(args.rounds):
            # The order turns each round: no mode always runs first or last
            # (warmer caches, a later share of the load).
            for mode in modes[round_ % len(modes):] + modes[:round_ % len(modes)]:
                served_mode[0] = mode
                timings[name][mode] += BLOCKS[name](args.steps, clients.get(mode))
                if mode != "plain":
                    hook_seconds.setdefault(mode, [0.0, 0])[1] += args.steps + WARMUP
        for mode in clients:
            seconds, steps = hook_seconds[mode]
            timings[name][mode + "_hook_s_per_step"] = seconds / steps
            timings[name][mode + "_reports_per_step"] = {
                phase: [calls / steps, total / steps]
                for phase, (calls, total) in sorted(report_calls.get(mode, {}).items())}
    if dist.get_rank() == 0:
        Path(args.out, "ranks.json").write_text(json.dumps(timings))
    dist.barrier()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed steps per block")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of blocks: plain, served (and before)")
    parser.add_argument("--frameworks", default="hf,accelerate,lightning,torchtitan")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--before-daemon", metavar="SUMMOND",
                        help="a second summond binary (e.g. built at an earlier commit): "
                             "every round also runs served blocks against it, beside the "
                             "same plain ones")
    parser.add_argument("--before-calls", action="store_true",
                        help="every round also runs served blocks against the same summond "
                             "with the client's calls before issue 35c (5 per step)")
    parser.add_argument("--role", choices=["rank"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "rank":
        return rank_main(args)

    import contextlib
    import socket

    from summon.local import LocalDaemon
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="summon-bench-"))
        daemon = stack.enter_context(LocalDaemon(local_ranks=2, data_dir=tmp))
        env = dict(os.environ, SUMMON_SERVER=daemon.address, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), WORLD_SIZE="2", OMP_NUM_THREADS="1",
                   PYTHONPATH=str(REPO / "client" / "python"))
        if args.before_daemon:
            before_dir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="summon-bench-before-"))
            before = stack.enter_context(LocalDaemon(local_ranks=2, data_dir=before_dir,
                                                     binary=args.before_daemon))
            env["SUMMON_SERVER_BEFORE"] = before.address
        command = [sys.executable, __file__, "--role", "rank", "--out", tmp, "--steps",
                   str(args.steps), "--rounds", str(args.rounds), "--frameworks",
                   args.frameworks] + (["--before-calls"] if args.before_calls else [])
        ranks = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                 for r in range(2)]
        if any(p.wait() for p in ranks):
            raise SystemExit("a rank failed")
        timings = json.loads((Path(tmp) / "ranks.json").read_text())
    figures: dict[str, Any] = {"cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}
    print(f"W=2 CPU gloo, {figures['cpus']} CPUs, load average {figures['load_average']:.1f}")
    for name, times in timings.items():
        plain = statistics.median(times["plain"])
        quartiles = statistics.quantiles(times["plain"], n=4)
        figures[name] = {"plain_step_s": plain, "steps": len(times["plain"]),
                         "plain_quartiles_s": [quartiles[0], quartiles[2]]}
        print(f"  {name:10s} plain  {plain * 1e3:7.1f} ms (median of {len(times['plain'])} "
              f"steps, quartiles {quartiles[0] * 1e3:.1f}-{quartiles[2] * 1e3:.1f})")
        for mode in [m for m in ("served", "before") if m in times]:
            served = statistics.median(times[mode])
            quartiles = statistics.quantiles(times[mode], n=4)
            hooks = times[mode + "_hook_s_per_step"]
            reports = times[mode + "_reports_per_step"]
            figures[name][mode] = {
                "step_s": served, "ratio": plain / served, "integration_s_per_step": hooks,
                "ratio_from_integration": (served - hooks) / served,
                "reports_per_step": reports, "quartiles_s": [quartiles[0], quartiles[2]]}
            label = "served" if mode == "served" else "before"
            print(f"  {'':10s} {label} {served * 1e3:7.1f} ms "
                  f"({quartiles[0] * 1e3:.1f}-{quartiles[2] * 1e3:.1f})  "
                  f"ratio {plain / served:.3f}x; "
                  f"inside summon {hooks * 1e3:.2f} ms/step = {(served - hooks) / served:.4f}x;"
                  f" phase reports waited for: "
                  f"{sum(c for p, (c, _) in reports.items() if ':' not in p):.2f} calls, "
                  f"{sum(t for p, (_, t) in reports.items() if ':' not in p) * 1e3:.2f} "
                  "ms/step (" + ", ".join(
                      f"{phase} {calls:.2f} x {total / calls * 1e3:.2f} ms"
                      for phase, (calls, total) in reports.items() if calls) + ")")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
