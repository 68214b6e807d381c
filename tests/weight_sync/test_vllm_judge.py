"""The judge is the engine: vLLM 0.33's own models and load_weights, one
process per TP rank over gloo (tests/weight_sync/vllm_judge.py), against
summon.sync's generated plans, for TP = 1, 2, 4 and the Llama, Qwen2, Qwen3
(tied) and Qwen3-MoE families in fp32 and bf16 (tests/weight_sync/cases.py).

Four processes run everything: each imports vLLM once (most of the cost)
and takes part in the TP = 4, then 2, then 1 groups its rank belongs to.
"""

from __future__ import annotations

import os

import pytest

import cases
from judge_run import assert_ranks_hold_the_plan, run_ranks

TP_SIZES = (4, 2, 1)
TIMEOUT_S = float(os.environ.get("SUMMON_JUDGE_TIMEOUT_S", "1500"))


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """{(tp, case): [rank results]} from one run of the rank processes."""
    return run_ranks(tmp_path_factory.mktemp("judge"), TP_SIZES, timeout_s=TIMEOUT_S)


CASE_IDS = [f"{n}/{e}<-{t}" for n, e, t in cases.CASES]


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize("case", CASE_IDS)
def test_every_rank_holds_the_plan_bit_for_bit(judged: dict, tp: int, case: str) -> None:
    assert_ranks_hold_the_plan(judged.get((tp, case), []), tp)
