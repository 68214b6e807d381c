"""One rank of an FSDP job that the conformance tests spawn (python worker.py CASES OUT).

CASES is a JSON file: a list of cases, run one after the other in one
process group. Per case the rank wraps the model (model.wrap), serves it
through summon unless `serve` is false, trains `steps` AdamW steps on
seeded batches and, on rank 0, saves what FSDP itself says the full
parameters are (FSDP1 summon_full_params, FSDP2 full_tensor) to
OUT/<name>.pt, beside each step's loss and the external-write callbacks it
saw. A case may also:
  edit: "summon" | "torch"  after step `edit_after`, rank 0 edits EDITED
        (x * 0.5 + 0.25) through a summon session with writeback, or
        through FSDP's own API (the reference);
  grads: true               also serve gradients; the reference keeps the
                            last backward's full gradients;
  hang_after: k             after k steps save the results so far, run the
                            next step's forward, write OUT/<name>.hung<rank>
                            and block there, mid-step (the test SIGKILLs it);
  groups: true              two optimizer parameter groups (decay / no decay);
  accumulate: true          two micro-batches per step, the first without
                            gradient sync (FSDP1 no_sync, FSDP2
                            set_requires_gradient_sync(False));
  eval: true                a forward under no_grad after every step, and
                            then (as "eval_phases") where the trainer and
                            summond have rank 0 and how many steps serve
                            counted;
  violate: true             after serve, replace a unit's storage behind
                            serve's back and record the error the next
                            forward raises (the rebinding contract);
  block: "wait" | "raise"   before step 2 rank 0 holds a writable session:
                            the next forward waits for its close, or raises
                            (serve's wait=None); see blocked_step;
  serve_as: M               serve model M (another case's) instead and record
                            the ValueError serve raises as "error";
  resume: true              serve an existing model: its shards are adopted
                            (the results then hold FSDP's full parameters
                            right after serve as "resumed");
  defaults: true            serve(module, name, optimizer=...) and nothing
                            else: serve's own client, wait and timeouts;
  stop: {pid, after, seconds}  after step `after` rank 0 stops summond (pid)
                            with SIGSTOP for `seconds` while the job trains
                            on; every rank writes when each step ended
                            (time.time()) and how long serve's phase reports
                            held it to OUT/<name>.ends<rank>.json, rank 0 the
                            stop's start and end to OUT/<name>.stopped.json.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import model as tiny  # noqa: E402

import summon  # noqa: E402
import summon.torch as st  # noqa: E402

EDITED = "blocks.0.mlp.0.weight"


def clean(name: str) -> str:
    return name.replace("_fsdp_wrapped_module.", "")


def full_params(module: torch.nn.Module, case: dict, grads: bool = False,
                **options: Any) -> dict[str, torch.Tensor]:
    """FSDP's own view of every full parameter (or gradient), cloned."""
    out = {}
    if case["api"] == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        with FSDP.summon_full_params(module, with_grads=grads, **options):
            for name, param in module.named_parameters(remove_duplicate=False):
                tensor = param.grad if grads else param
                if tensor is not None:
                    out[clean(name)] = tensor.detach().clone()
        return out
    for name, param in module.named_parameters(remove_duplicate=False):
        tensor = param.grad if grads else param
        if tensor is not None:
            out[name] = tensor.full_tensor().detach().clone()
    return out


def edit_through_fsdp(module: torch.nn.Module, case: dict) -> None:
    """The reference edit: FSDP1 summon_full_params(writeback=True); FSDP2 the
    full tensor written back through its DTensor."""
    with torch.no_grad():
        if case["api"] == "fsdp1":
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            with FSDP.summon_full_params(module, writeback=True):
                param = dict((clean(n), p) for n, p in module.named_parameters())[EDITED]
                param.mul_(0.5).add_(0.25)
            return
        from torch.distributed.tensor import distribute_tensor
        param = dict(module.named_parameters())[EDITED]
        full = param.full_tensor().mul_(0.5).add_(0.25)
        param.copy_(distribute_tensor(full, param.device_mesh, param.placements))


def edit_through_summon(client: summon.Client, name: str) -> None:
    with client.summon_full_params(name, scope="blocks.0") as session:
        session[EDITED] = session[EDITED] * 0.5 + 0.25


def no_sync(module: torch.nn.Module, case: dict, on: bool) -> None:
    """Gradient accumulation without reduction (one micro-batch) or with it."""
    if case["api"] == "fsdp2":
        module.set_requires_gradient_sync(not on)
    elif on:
        module._summon_no_sync = module.no_sync()
        module._summon_no_sync.__enter__()
    else:
        module._summon_no_sync.__exit__(None, None, None)


def violate_contract(module: torch.nn.Module, case: dict, rank: int) -> str:
    """Replaces one unit's sharded storage with a copy; the next forward must refuse."""
    with torch.no_grad():
        if case["api"] == "fsdp1":
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            flat = FSDP.fsdp_modules(module)[1]._handle.flat_param
            flat.data = flat.data.clone()
        else:
            param = module.blocks[1]._get_fsdp_state()._fsdp_param_group.fsdp_params[0]
            param._sharded_param_data = param._sharded_param_data.clone()
    try:
        module(tiny.batch(0, rank)[:, :-1])
    except RuntimeError as error:
        return str(error)
    return ""


def blocked_step(module: torch.nn.Module, case: dict, client: summon.Client,
                 rank: int) -> Any:
    """Rank 0 holds a writable session between steps (R3). block "wait": it
    closes after 1 s and the next forward waits for it (the seconds it took);
    "raise": serve(wait=None) makes that forward raise on every rank (the
    error's code), and training then goes on."""
    dist.barrier()
    session = client.open_session(case["name"], scope="blocks.1") if rank == 0 else None
    dist.barrier()
    if case["block"] == "wait":
        if session is not None:
            threading.Timer(1.0, client.close_session, (session.id,)).start()
        start = time.monotonic()
        with torch.no_grad():  # FORWARD (after the wait) ... IDLE
            module(tiny.batch(99, rank)[:, :-1])
        return time.monotonic() - start
    try:
        with torch.no_grad():
            module(tiny.batch(99, rank)[:, :-1])
        code = ""
    except summon.SummonError as error:
        code = error.code
    dist.barrier()
    if session is not None:
        client.close_session(session.id)
    dist.barrier()
    return code


def stop_summond(stop: dict, window: Path) -> threading.Thread:
    """SIGSTOPs summond now and SIGCONTs it `seconds` later (the thread);
    the stop's start and end (time.time()) go to `window`."""
    os.kill(stop["pid"], signal.SIGSTOP)
    started = time.time()

    def resume() -> None:
        time.sleep(stop["seconds"])
        window.write_text(json.dumps([started, time.time()]))
        os.kill(stop["pid"], signal.SIGCONT)

    thread = threading.Thread(target=resume)
    thread.start()
    return thread


def run_case(case: dict, out: Path, client: summon.Client) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    module = tiny.wrap(case, world)
    params = [p for p in module.parameters() if p.requires_grad]
    if case.get("groups"):
        params = [{"params": [p for p in params if p.ndim >= 2]},
                  {"params": [p for p in params if p.ndim < 2], "lr": 0.005,
                   "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(params, lr=0.02, weight_decay=0.01)
    edits: list[list[str]] = []
    served = None
    if case.get("serve_as"):  # serving another case's model: refused if it does not fit
        try:
            st.serve(module, case["serve_as"], client=client, optimizer=optimizer)
            message = ""
        except ValueError as error:
            message = str(error)
        if rank == 0:
            torch.save({"error": message}, out / f"{case['name']}.pt")
        dist.barrier()
        return
    if case.get("defaults"):
        served = st.serve(module, case["name"], optimizer=optimizer)
    elif case.get("serve", True):
        served = st.serve(module, case["name"], client=client, optimizer=optimizer,
                          grads=case.get("grads", False), lease_seconds=case.get("lease", 10),
                          wait=None if case.get("block") == "raise" else 60.0,
                          on_external_write=lambda s, units: edits.append(
                              sorted(u.unit for u in units)))
    result: dict[str, Any] = {"losses": [], "edits": edits}
    if case.get("resume"):
        result["resumed"] = full_params(module, case)
    if case.get("violate"):
        result["violation"] = violate_contract(module, case, rank)
        served.close(unbind=False)
        if rank == 0:
            torch.save(result, out / f"{case['name']}.pt")
        dist.barrier()
        return
    ends: list[float] = []
    held: list[float] = []  # seconds serve's phase reports held each step
    stopper = None
    for step in range(case.get("steps", 3)):
        held_before = served.trainer.report_seconds if served is not None else 0.0
        if case.get("stop") and step == case["stop"]["after"]:
            dist.barrier()  # every rank starts this step with summond stopped
            if rank == 0:
                stopper = stop_summond(case["stop"], out / f"{case['name']}.stopped.json")
            dist.barrier()
        if case.get("hang_after") == step:
            result["params"] = full_params(module, case)
            if rank == 0:
                torch.save(result, out / f"{case['name']}.pt")
            module(tiny.batch(step, rank)[:, :-1])  # FORWARD, BETWEEN: mid-step
            # No backward follows: serve's deferred BETWEEN goes out alone
            # within DEFER_SECONDS (summon.phases); the kill comes after it.
            while client.describe_model(case["name"]).ranks[rank].phase != "BETWEEN":
                time.sleep(0.01)
            (out / f"{case['name']}.hung{rank}").write_text(str(os.getpid()))
            time.sleep(3600)
        if case.get("accumulate"):
            no_sync(module, case, True)
            tiny.loss_of(module, tiny.batch(step + 100, rank)).backward()
            no_sync(module, case, False)
        if case.get("block") and step == 1:
            result["blocked"] = blocked_step(module, case, client, rank)
        loss = tiny.loss_of(module, tiny.batch(step, rank))
        loss.backward()
        result["losses"].append(loss.detach().clone())
        if case.get("grads") and step == case.get("steps", 3) - 1:
            result["grads"] = full_params(module, case, grads=True)
        optimizer.step()
        optimizer.zero_grad()
        ends.append(time.time())
        if served is not None:
            held.append(served.trainer.report_seconds - held_before)
        if case.get("eval"):
            with torch.no_grad():
                result.setdefault("eval", []).append(
                    tiny.loss_of(module, tiny.batch(step + 200, rank)).clone())
            if served is not None:
                result.setdefault("eval_phases", []).append(
                    (served.trainer.phase,
                     client.describe_model(case["name"]).ranks[0].phase, served.steps))
        if case.get("edit") and step + 1 == case.get("edit_after", 1):
            dist.barrier()
            if case["edit"] == "torch":
                edit_through_fsdp(module, case)
            elif rank == 0:
                edit_through_summon(client, case["name"])
            dist.barrier()
    if stopper is not None:
        stopper.join()
    if case.get("stop"):
        (out / f"{case['name']}.ends{rank}.json").write_text(
            json.dumps({"ends": ends, "held": held}))
    result["params"] = full_params(module, case)
    if case["api"] == "fsdp1":
        if case.get("strategy") != "NO_SHARD":  # FSDP refuses offload_to_cpu there
            result["rank0_offload"] = full_params(module, case, rank0_only=True,
                                                  offload_to_cpu=True, writeback=False)
    result["steps"] = served.steps if served is not None else None
    if served is not None:
        served.close()
    if rank == 0:
        torch.save(result, out / f"{case['name']}.pt")
    dist.barrier()


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    dist.init_process_group("gloo")
    client = summon.Client(timeout=60)
    try:
        for case in cases:
            start = time.monotonic()
            run_case(case, out, client)
            print(f"case {case['name']}: {time.monotonic() - start:.2f} s", flush=True)
    finally:
        client.close()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
