"""What summon's integrations cost each framework's training step (issue 35).

    scripts/python bench/integrations_overhead.py [--steps 6] [--rounds 2] [--json OUT]

Starts a summond (LocalDaemon) and W = 2 gloo ranks on the CPU; each rank
trains a Llama of about 7 M parameters with FSDP2 under each framework in
turn (the Hugging Face Trainer, Accelerate, Lightning's
ModelParallelStrategy), alternating blocks of steps without and with the
integration in the same run (plain, served, served, plain, ...), so both see
the same machine load. A block builds the framework's trainer afresh; its
first two steps are warm-up and not timed. Each step is timed from the
framework's step-begin event to its step-end event (the Accelerate loop:
forward to zero_grad). On a CPU accelerate and the Trainer are forced to FSDP
as the tests do (tests/integrations/worker.py's force_fsdp_state, imported
from there). Prints each framework's median step time both ways and the
ratio plain/served (1.0 = no cost).
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


def hf_block(steps: int, served: bool) -> list[float]:
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
    callbacks = [SummonCallback("bench-hf")] if served else []
    Trainer(model=llama(), args=args, train_dataset=data,
            callbacks=callbacks + [Clock()]).train()
    return times[WARMUP:]


def accelerate_block(steps: int, served: bool) -> list[float]:
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
    serving = (summon_accelerate.serve(accelerator, model, "bench-acc", optimizer=optimizer)
               if served else None)
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


def lightning_block(steps: int, served: bool) -> list[float]:
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

    callbacks = [SummonCallback("bench-pl")] if served else []
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, max_steps=steps + WARMUP, logger=False,
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=callbacks + [Clock()])
    data = torch.utils.data.DataLoader(batches(8 * (steps + WARMUP)), batch_size=4)
    trainer.fit(Module(), data)
    return times[WARMUP:]


BLOCKS: dict[str, Callable[[int, bool], list[float]]] = {
    "hf": hf_block, "accelerate": accelerate_block, "lightning": lightning_block}


def rank_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    dist.init_process_group("gloo")
    timings: dict[str, dict[str, list[float]]] = {}
    for name in args.frameworks.split(","):
        timings[name] = {"plain": [], "served": []}
        for round_ in range(args.rounds):
            # plain first in even rounds, served first in odd ones: neither
            # always runs second (warmer caches, a later share of the load).
            for served in ((False, True) if round_ % 2 == 0 else (True, False)):
                key = "served" if served else "plain"
                timings[name][key] += BLOCKS[name](args.steps, served)
    if dist.get_rank() == 0:
        Path(args.out, "ranks.json").write_text(json.dumps(timings))
    dist.barrier()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed steps per block")
    parser.add_argument("--rounds", type=int, default=2, help="plain/served block pairs")
    parser.add_argument("--frameworks", default="hf,accelerate,lightning")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--role", choices=["rank"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "rank":
        return rank_main(args)

    import socket

    from summon.local import LocalDaemon
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="summon-bench-") as tmp, \
            LocalDaemon(local_ranks=2, data_dir=tmp) as daemon:
        env = dict(os.environ, SUMMON_SERVER=daemon.address, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), WORLD_SIZE="2", OMP_NUM_THREADS="1",
                   PYTHONPATH=str(REPO / "client" / "python"))
        command = [sys.executable, __file__, "--role", "rank", "--out", tmp, "--steps",
                   str(args.steps), "--rounds", str(args.rounds), "--frameworks",
                   args.frameworks]
        ranks = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                 for r in range(2)]
        if any(p.wait() for p in ranks):
            raise SystemExit("a rank failed")
        timings = json.loads((Path(tmp) / "ranks.json").read_text())
    figures = {"cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}
    print(f"W=2 CPU gloo, {figures['cpus']} CPUs, load average {figures['load_average']:.1f}")
    for name, times in timings.items():
        plain, served = statistics.median(times["plain"]), statistics.median(times["served"])
        figures[name] = {"plain_step_s": plain, "served_step_s": served,
                         "ratio": plain / served, "steps": len(times["plain"])}
        print(f"  {name:10s} plain {plain * 1e3:7.1f} ms  served {served * 1e3:7.1f} ms  "
              f"ratio {plain / served:.3f}x (medians of {len(times['plain'])} steps each)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
