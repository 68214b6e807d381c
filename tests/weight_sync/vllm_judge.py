"""One TP rank of the judge: vLLM's own model and load_weights against the
sync plan. Run as `vllm_judge.py RANK TP_SIZES PORTS OUT_DIR [CASE ...]`
(PORTS: one free port per TP size, same order),
one process per rank of the largest TP size; for each TP size (largest first)
the ranks below it join a gloo group of that size (vLLM's distributed state
is torn down and made again between sizes, so vLLM is imported once per
process) and, for every case:

1. vLLM builds its real model for that rank (LoadConfig dummy, a local
   config.json) and load_weights(full HF state dict) fills it: the truth;
2. the plan (summon.sync.plan_for) applied to the same state dict must give
   every vLLM parameter of the rank, bit for bit (torch.equal), and nothing
   else;
3. a second vLLM model (dummy random weights) gets summon.sync.pull's tensors
   through load_into (the test reader serving boxes; no full tensor enters
   the engine) and must then equal the first, parameter by parameter.

With SUMMON_JUDGE_SERVER / _MODEL / _VERSION set (test_vllm_pull_summond.py)
the state dict is that published version's full tensors read from summond
and pull reads through summond's ReadSlices (summon.Client) instead.

Writes OUT_DIR/rank{RANK}.json: per (tp, case) the mismatches and seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import summon  # noqa: E402

import cases  # noqa: E402
from full_state_test_reader import FullStateDictTestReader  # noqa: E402


def compare(truth: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> list[str]:
    problems = [f"missing {n}" for n in sorted(set(truth) - set(got))]
    problems += [f"extra {n}" for n in sorted(set(got) - set(truth))]
    for name in sorted(set(truth) & set(got)):
        a, b = truth[name], got[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{name}: {tuple(b.shape)} {b.dtype}, vLLM "
                            f"{tuple(a.shape)} {a.dtype}")
        elif not torch.equal(a, b):
            problems.append(f"{name}: values differ")
    return problems


def check_sources(plan, state_dict, tied: bool) -> list[str]:
    """The plan's trainer names and shapes are the HF model's."""
    problems = []
    for fqn, shape in plan.sources.items():
        if fqn not in state_dict:
            problems.append(f"plan source {fqn} is not in the HF state dict")
        elif tuple(state_dict[fqn].shape) != shape:
            problems.append(f"plan source {fqn} {shape}, HF {tuple(state_dict[fqn].shape)}")
    unused = set(state_dict) - set(plan.sources) - ({"lm_head.weight"} if tied else set())
    problems += [f"HF tensor {n} not in the plan" for n in sorted(unused)]
    return problems


def engine_config(model_dir: str, dtype: str, tp: int):
    from vllm.config import (DeviceConfig, LoadConfig, ModelConfig, ParallelConfig,
                             VllmConfig)
    return VllmConfig(
        model_config=ModelConfig(model=model_dir, dtype=dtype, skip_tokenizer_init=True,
                                 enforce_eager=True, max_model_len=256),
        parallel_config=ParallelConfig(tensor_parallel_size=tp),
        load_config=LoadConfig(load_format="dummy"), device_config=DeviceConfig("cpu"))


def run_case(name: str, engine_dtype: str, trainer_dtype: str, tp: int, rank: int,
             workdir: str) -> dict:
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    import summon.sync

    started = time.monotonic()
    config = cases.hf_config(name)
    model_dir = os.path.join(workdir, name)
    os.makedirs(model_dir, exist_ok=True)
    config.save_pretrained(model_dir)
    plan = summon.sync.plan_for(config, tp, dtype=engine_dtype)
    plan = summon.sync.SyncPlan.from_json(plan.to_json())  # the file form is the same plan
    server = os.environ.get("SUMMON_JUDGE_SERVER")
    if server:  # a published version in summond: the full tensors read as the truth's input
        client = summon.Client(server, timeout=60)
        model_name, version = os.environ["SUMMON_JUDGE_MODEL"], int(
            os.environ["SUMMON_JUDGE_VERSION"])
        state_dict = {fqn: torch.from_numpy(client.read_slices(model_name, version, [
            summon.SliceRequest(fqn, [(0, n) for n in shape], trainer_dtype)])[0].copy())
            for fqn, shape in plan.sources.items()}
        if trainer_dtype == "bfloat16":
            state_dict = {k: v.view(torch.int16).view(torch.bfloat16)
                          for k, v in state_dict.items()}
        reader = client
    else:
        state_dict = cases.random_state_dict(name, trainer_dtype)
        model_name, version = "judge", 1
        reader = FullStateDictTestReader(state_dict)
    models = []
    for _ in range(2):  # each model registers its layers in its own config
        vllm_config = engine_config(model_dir, engine_dtype, tp)
        # As vLLM's own loader does (base_loader.py): parameters in the engine dtype.
        with set_current_vllm_config(vllm_config), \
                set_default_torch_dtype(vllm_config.model_config.dtype):
            models.append(initialize_model(vllm_config))
    truth_model, live_model = models
    truth_model.load_weights(iter(state_dict.items()))
    truth = {n: p.detach() for n, p in truth_model.named_parameters()}
    built = time.monotonic()

    problems = check_sources(plan, state_dict, bool(config.tie_word_embeddings))
    try:
        problems += compare(truth, dict(summon.sync.apply_plan(plan, rank, state_dict)))
    except Exception as error:  # noqa: BLE001 (named in the report; load_into still checked)
        problems.append(f"apply_plan: {type(error).__name__}: {error}")

    # Loads without gathering: pulled slices copied into a live model.
    before = {n: p.detach().clone() for n, p in live_model.named_parameters()}
    try:
        loaded = summon.sync.load_into(live_model, summon.sync.pull(
            reader, model_name, version, plan, rank, max_batch_bytes=64 << 10))
    except Exception as error:  # noqa: BLE001
        problems.append(f"load_into: {type(error).__name__}: {error}")
        loaded = set()
    live = {n: p.detach() for n, p in live_model.named_parameters()}
    problems += [f"load_into: {p}" for p in compare(truth, live)]
    changed = sum(not torch.equal(before[n], live[n]) for n in live)
    slice_elements = sum(p.numel for e in plan.entries(rank) for p in e.pieces)
    if not server and reader.elements != slice_elements:
        problems.append(f"pull read {reader.elements} elements, the plan's boxes "
                        f"hold {slice_elements}")
    return {"tp": tp, "case": f"{name}/{engine_dtype}<-{trainer_dtype}", "problems": problems,
            "params": len(truth), "loaded": len(loaded), "changed_by_load_into": changed,
            "read_calls": getattr(reader, "requests", None), "build_s": round(built - started, 2),
            "check_s": round(time.monotonic() - built, 2)}


def main() -> None:
    rank, out_dir = int(sys.argv[1]), sys.argv[4]
    ports = dict(zip((int(s) for s in sys.argv[2].split(",")),
                     (int(p) for p in sys.argv[3].split(","))))
    wanted = set(sys.argv[5:])
    t0 = time.monotonic()
    from vllm.config import set_current_vllm_config
    from vllm.distributed import (destroy_distributed_environment, destroy_model_parallel,
                                  init_distributed_environment, initialize_model_parallel)
    import_s = time.monotonic() - t0
    results = []
    workdir = tempfile.mkdtemp(prefix=f"judge-r{rank}-")
    for tp in sorted(ports, reverse=True):
        if rank >= tp:
            continue
        # The groups are made under a MoE model's config: vLLM creates the
        # expert-parallel group (which FusedMoE asks for) only then.
        group_dir = os.path.join(workdir, "group")
        cases.hf_config("qwen3_moe").save_pretrained(group_dir)
        with set_current_vllm_config(engine_config(group_dir, "float32", tp)):
            init_distributed_environment(world_size=tp, rank=rank, local_rank=rank,
                                         distributed_init_method=f"tcp://127.0.0.1:{ports[tp]}",
                                         backend="gloo")
            initialize_model_parallel(tensor_model_parallel_size=tp)
        for name, engine_dtype, trainer_dtype in cases.CASES + cases.SERVER_CASES:
            if (name not in wanted) if wanted else (name, engine_dtype, trainer_dtype) \
                    not in cases.CASES:
                continue
            try:
                results.append(run_case(name, engine_dtype, trainer_dtype, tp, rank, workdir))
            except Exception as error:  # reported, so one broken case names itself
                results.append({"tp": tp, "case": f"{name}/{engine_dtype}<-{trainer_dtype}",
                                "problems": [f"{type(error).__name__}: {error}"]})
        destroy_model_parallel()
        destroy_distributed_environment()
    shutil.rmtree(workdir, ignore_errors=True)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "import_s": round(import_s, 2),
                   "total_s": round(time.monotonic() - t0, 2), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
