"""One rank of a framework job the integration tests spawn (python worker.py CASES OUT).

CASES is a JSON list; each case names a `mode` and the summon model `name`:
  hf           the Hugging Face Trainer, FSDP2 through Accelerate;
  hf-fsdp1     the same Trainer, FSDP1 (fsdp_config version 1);
  accelerate   Accelerate's prepare(model, optimizer), FSDP2, a hand loop;
  accelerate-fsdp1  the same with accelerate's FSDP1 plugin (fsdp_version=1);
  lightning    Lightning's ModelParallelStrategy (fully_shard, data_parallel_size=2);
  lightning-fsdp1  Lightning's FSDPStrategy (FSDP1), through a CPU subclass;
  torchtitan   torchtitan's Llama3 and parallelize_llama (titan.py);
  dcp          torch's fully_shard: DCP out of an FSDP2 job and through summon.
Per training mode the rank runs the framework twice on the same seeds: once
served by summon's integration with an edit through a summon session after
step 2, once plain with the same edit through the framework's own full
tensor (the reference). Rank 0 saves, to OUT/<name>.pt: how the model is
sharded (asserted first: accelerate and the Trainer fall back to DDP on a
CPU unless forced, which this file does, test code only), both runs' full
parameters (DTensor.full_tensor()), and the phases seen at the optimizer
events.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

import summon
import summon.phases
import summon.torch as st

STEPS = 3
EDIT_AFTER = 2
EDITED = "model.layers.0.mlp.up_proj.weight"


def build_llama(seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    # Odd sizes: FSDP's dim-0 chunks are uneven and padded.
    config = LlamaConfig(vocab_size=97, hidden_size=40, intermediate_size=70,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=32, tie_word_embeddings=False)
    return LlamaForCausalLM(config)


def tokens(index: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 + index)
    return torch.randint(0, 97, (12,), generator=generator)


def sharding(module: torch.nn.Module) -> str:
    """How FSDP shards `module`'s parameters; raises if it does not (a DDP fallback)."""
    from torch.distributed.tensor import DTensor, Shard
    params = list(module.named_parameters())
    if not all(isinstance(p, DTensor) for _, p in params):
        raise AssertionError(f"not sharded by FSDP2: {type(module).__name__} holds plain "
                             f"tensors ({params[0][0]})")
    for name, p in params:
        if tuple(p.placements) != (Shard(0),) or p.to_local().shape[0] >= p.shape[0]:
            raise AssertionError(f"{name}: placements {p.placements}, local "
                                 f"{tuple(p.to_local().shape)} of {tuple(p.shape)}")
    return f"fsdp2 Shard(0) {len(params)}"


def full_params(module: torch.nn.Module,
                root: Optional[torch.nn.Module] = None) -> dict[str, torch.Tensor]:
    """FSDP's own view of every full parameter (collective: every rank calls
    it): FSDP2 full_tensor(), or FSDP1 summon_full_params of `root`."""
    if root is None:
        return {n: p.full_tensor().detach().clone() for n, p in module.named_parameters()}
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    with FSDP.summon_full_params(root):
        return {clean(n): p.detach().clone() for n, p in module.named_parameters()}


def clean(name: str) -> str:
    """An FQN without FSDP1's wrapper prefix (the inner units' own)."""
    return name.replace("_fsdp_wrapped_module.", "")


def fsdp1_sharding(root: torch.nn.Module) -> str:
    """How FSDP1 shards `root`: every unit's FlatParameter holds less than its
    full size on this rank; raises otherwise."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp._flat_param import FlatParameter
    flats = [m._handle.flat_param for m in FSDP.fsdp_modules(root) if m._handle is not None]
    for flat in flats:
        if not isinstance(flat, FlatParameter) or (
                flat.numel() >= flat._unpadded_unsharded_size.numel()):
            raise AssertionError(f"not sharded by FSDP1: {type(flat).__name__} "
                                 f"{flat.numel()} elements")
    if not flats:
        raise AssertionError(f"not sharded by FSDP1: {type(root).__name__}")
    return f"fsdp1 FlatParameter {len(flats)}"


def edit_through_summon(client: summon.Client, name: str, fqn: str) -> None:
    dist.barrier()  # every rank IDLE after its step
    if dist.get_rank() == 0:
        with client.summon_full_params(name) as session:
            session[fqn] = session[fqn] * 0.5 + 0.25
    dist.barrier()


def edit_through_fsdp(module: torch.nn.Module, fqn: str,
                      root: Optional[torch.nn.Module] = None) -> None:
    """The reference edit: FSDP2 the full tensor written back through its
    DTensor; FSDP1 summon_full_params(root, writeback=True)."""
    from torch.distributed.tensor import distribute_tensor
    if root is not None:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        with torch.no_grad(), FSDP.summon_full_params(root, writeback=True):
            {clean(n): p for n, p in module.named_parameters()}[fqn].mul_(0.5).add_(0.25)
        return
    with torch.no_grad():
        param = dict(module.named_parameters())[fqn]
        full = param.full_tensor().mul_(0.5).add_(0.25)
        param.copy_(distribute_tensor(full, param.device_mesh, param.placements))


def phase_of(client: summon.Client, name: str, served: Any) -> tuple:
    """Where serve's trainer and summond have this rank, and the steps counted."""
    rank = dist.get_rank()
    return (served.trainer.phase, client.describe_model(name).ranks[rank].phase, served.steps)


# CPU-only workaround (test code only): accelerate keeps a MULTI_CPU job on DDP
# even with an FSDP plugin; force its state to FSDP, as on a GPU. FSDP1 also
# needs the state's device to be plain "cpu" (FSDP1 refuses its "cpu:0":
# "cpu vs cpu:0").
def force_fsdp_state() -> None:
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType
    original = AcceleratorState.__init__
    if getattr(original, "_summon_forced", False):
        return

    def init(self: Any, *args: Any, fsdp_plugin: Any = None, **kwargs: Any) -> None:
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            if fsdp_plugin.fsdp_version == 1:
                self.device = torch.device("cpu")
                PartialState._shared_state["device"] = torch.device("cpu")

    init._summon_forced = True  # type: ignore[attr-defined]
    AcceleratorState.__init__ = init


# Hugging Face Trainer ----------------------------------------------------------------


def run_hf(case: dict, client: summon.Client, serve: bool, out: Path) -> dict:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from summon.integrations.hf import SummonCallback
    force_fsdp_state()
    record: dict = {"phases": []}
    fsdp1 = case["mode"] == "hf-fsdp1"

    class Probe(TrainerCallback):
        def __init__(self, summon_callback: Optional[SummonCallback]):
            self.summon_callback = summon_callback

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           **kwargs: Any) -> None:
            record["sharding"] = fsdp1_sharding(model) if fsdp1 else sharding(model)

        def _phase(self) -> None:
            if self.summon_callback is not None:
                record["phases"].append(phase_of(client, case["name"],
                                                 self.summon_callback.served))

        def on_pre_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            self._phase()

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                        **kwargs: Any) -> None:
            self._phase()
            if state.global_step == EDIT_AFTER:
                if serve:
                    edit_through_summon(client, case["name"], EDITED)
                else:
                    edit_through_fsdp(model, EDITED, model if fsdp1 else None)

    callback = SummonCallback(case["name"], client=client) if serve else None
    # FSDP1's sync_module_states (its default here) broadcasts from a GPU.
    version = ({"version": 1, "sync_module_states": False} if fsdp1 else
               {"version": 2, "reshard_after_forward": True})
    args = TrainingArguments(
        output_dir=str(out / f"hf-{serve}"), max_steps=STEPS, per_device_train_batch_size=2,
        learning_rate=1e-2, lr_scheduler_type="constant", report_to=[], save_strategy="no",
        logging_strategy="no", seed=0, disable_tqdm=True, dataloader_num_workers=0,
        use_cpu=torch.cuda.device_count() == 0, fsdp=True,
        fsdp_config={**version, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"],
                     "auto_wrap_policy": "TRANSFORMER_BASED_WRAP"})
    data = [{"input_ids": tokens(i), "labels": tokens(i)} for i in range(2 * 2 * STEPS)]
    trainer = Trainer(model=build_llama(), args=args, train_dataset=data,
                      callbacks=[c for c in (callback, Probe(callback)) if c is not None])
    trainer.train()
    record["params"] = full_params(trainer.model, trainer.model if fsdp1 else None)
    return record


# Accelerate -------------------------------------------------------------------------


def run_accelerate(case: dict, client: summon.Client, serve: bool, out: Path) -> dict:
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin

    from summon.integrations import accelerate as summon_accelerate
    force_fsdp_state()
    fsdp1 = case["mode"] == "accelerate-fsdp1"
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=1 if fsdp1 else 2, auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["LlamaDecoderLayer"],
        reshard_after_forward="FULL_SHARD" if fsdp1 else True)
    accelerator = Accelerator(cpu=torch.cuda.device_count() == 0, fsdp_plugin=plugin)
    model = build_llama()
    if fsdp1:  # the optimizer over FSDP1's parameters, as accelerate's docs ask
        model = accelerator.prepare(model)
        optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model, optimizer = accelerator.prepare(model, optimizer)
    root = model if fsdp1 else None
    record: dict = {"sharding": fsdp1_sharding(model) if fsdp1 else sharding(model),
                    "phases": []}
    served = (summon_accelerate.serve(accelerator, model, case["name"], client=client,
                                      optimizer=optimizer) if serve else None)
    rank = dist.get_rank()
    for step in range(1, STEPS + 1):
        ids = torch.stack([tokens(4 * step + 2 * rank + i) for i in range(2)])
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if served is not None:
            record["phases"].append(phase_of(client, case["name"], served))
        if step == EDIT_AFTER:
            if serve:
                edit_through_summon(client, case["name"], EDITED)
            else:
                edit_through_fsdp(model, EDITED, root)
    if served is not None:
        served.close()
    record["params"] = full_params(model, root)
    return record


# Lightning --------------------------------------------------------------------------


def cpu_fsdp_strategy() -> Any:
    """Lightning's FSDPStrategy on a CPU (test code only): Lightning refuses a
    CPU accelerator for FSDPStrategy itself ("requires a GPU accelerator"),
    not for a subclass, and its wrapping passes the device's index (None on a
    CPU); this one wraps with device_id=cpu, as on a GPU with its index."""
    from lightning.pytorch.strategies import FSDPStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    class CpuFSDPStrategy(FSDPStrategy):
        def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
            return FullyShardedDataParallel(module=model, device_id=torch.device("cpu"),
                                            sharding_strategy=self.sharding_strategy,
                                            **self.kwargs)

    return CpuFSDPStrategy(auto_wrap_policy={LlamaDecoderLayer})


def run_lightning(case: dict, client: summon.Client, serve: bool, out: Path) -> dict:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import ModelParallelStrategy
    from torch.distributed.fsdp import fully_shard

    from summon.integrations.lightning import SummonCallback
    record: dict = {"phases": []}
    edited = "model." + EDITED
    fsdp1 = case["mode"] == "lightning-fsdp1"

    class Llama(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = build_llama()

        def configure_model(self) -> None:
            if fsdp1:
                return  # FSDPStrategy wraps the module itself
            mesh = self.device_mesh["data_parallel"]
            for layer in self.model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(self.model, mesh=mesh)

        def training_step(self, batch: torch.Tensor, index: int) -> torch.Tensor:
            return self.model(input_ids=batch, labels=batch).loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    class Probe(pl.Callback):
        def __init__(self, summon_callback: Optional[SummonCallback]):
            self.summon_callback = summon_callback

        def _phase(self) -> None:
            if self.summon_callback is not None:
                record["phases"].append(phase_of(client, case["name"],
                                                 self.summon_callback.served))

        def on_fit_start(self, trainer: Any, module: Any) -> None:
            record["sharding"] = (fsdp1_sharding(trainer.strategy.model) if fsdp1
                                  else sharding(module))

        def on_before_optimizer_step(self, *args: Any) -> None:
            self._phase()

        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            self._phase()
            if trainer.global_step == EDIT_AFTER:
                if serve:
                    edit_through_summon(client, case["name"], edited)
                else:
                    edit_through_fsdp(module, edited,
                                      trainer.strategy.model if fsdp1 else None)

    callback = SummonCallback(case["name"], client=client) if serve else None
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, max_steps=STEPS, logger=False,
        strategy=(cpu_fsdp_strategy() if fsdp1 else
                  ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)),
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[c for c in (callback, Probe(callback)) if c is not None])
    module = Llama()
    data = torch.utils.data.DataLoader([tokens(i) for i in range(2 * 2 * STEPS)],
                                       batch_size=2)
    trainer.fit(module, data)
    record["params"] = full_params(module, trainer.strategy.model if fsdp1 else None)
    return record


# DCP --------------------------------------------------------------------------------


def run_dcp(case: dict, client: summon.Client, out: Path) -> dict:
    """An FSDP2 job served as `name` trains, saves DCP itself (OUT/<name>-fsdp2),
    then rank 0 saves summon's model with save_dcp (OUT/<name>-summon) and every
    rank loads that into a fresh FSDP2 model of another seed."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard
    model = build_llama()
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    served = st.serve(model, case["name"], client=client, optimizer=optimizer)
    rank = dist.get_rank()
    for step in range(1, STEPS + 1):
        ids = torch.stack([tokens(4 * step + 2 * rank + i) for i in range(2)])
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    served.close()
    record: dict = {"sharding": sharding(model), "params": full_params(model)}
    dcp.save(model.state_dict(), checkpoint_id=str(out / f"{case['name']}-fsdp2"))
    if rank == 0:
        record["saved"] = st.save_dcp(client, case["name"], out / f"{case['name']}-summon")
    dist.barrier()
    fresh = build_llama(seed=7)
    for layer in fresh.model.layers:
        fully_shard(layer)
    fully_shard(fresh)
    state = fresh.state_dict()
    dcp.load(state, checkpoint_id=str(out / f"{case['name']}-summon"))
    record["reloaded"] = full_params(fresh)
    return record


def run_torchtitan(case: dict, client: summon.Client, serve: bool, out: Path) -> dict:
    import titan  # this directory (worker.py runs as a script)
    return titan.run(case, client, serve, sys.modules[__name__])


RUNS: dict[str, Callable[..., dict]] = {
    "hf": run_hf, "hf-fsdp1": run_hf, "accelerate": run_accelerate,
    "accelerate-fsdp1": run_accelerate, "lightning": run_lightning,
    "lightning-fsdp1": run_lightning, "torchtitan": run_torchtitan}


def count_calls(client: summon.Client) -> list:
    """The training thread's ReportPhase calls, (through, phase) each."""
    calls: list = []
    report_phase = client.report_phase

    def counted(model: str, rank: int, phase: str, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is threading.main_thread():
            calls.append((kwargs.get("through"), phase.upper()))
        return report_phase(model, rank, phase, *args, **kwargs)

    client.report_phase = counted  # type: ignore[method-assign]
    return calls


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    if not cases[0]["mode"].startswith("lightning"):  # Lightning starts its own
        dist.init_process_group("gloo")
    client = summon.Client(os.environ["SUMMON_SERVER"])
    calls = count_calls(client)
    # The calls per step, whatever the machine's load: a deferred BETWEEN is
    # never due alone (tests/python/test_phase_calls.py covers that path).
    summon.phases.DEFER_SECONDS = 3600.0
    for case in cases:
        if case["mode"] == "dcp":
            result = run_dcp(case, client, out)
        else:
            del calls[:]
            result = {"served": RUNS[case["mode"]](case, client, True, out)}
            result["served"]["calls"] = list(calls)
            result["plain"] = RUNS[case["mode"]](case, client, False, out)
        if dist.get_rank() == 0:
            torch.save(result, out / f"{case['name']}.pt")
    dist.barrier()
    client.close()


if __name__ == "__main__":
    main()
