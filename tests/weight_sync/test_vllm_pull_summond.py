"""End to end through summond, vLLM as the judge: examples/rl_weight_sync.py's
FSDP2 trainer (W = 2, gloo) trains and publishes a Llama every step; two
vLLM TP ranks then each take the published step: one model gets
load_weights(that version's full state dict), another load_into(pull(...))
of only its slices through ReadSlices; both must be equal bit for bit, and
equal to the plan applied to the full tensors.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import summon
from judge_run import assert_ranks_hold_the_plan, free_ports, run_ranks

REPO = Path(__file__).resolve().parents[2]
STEPS = 2


def test_vllm_ranks_pull_a_published_step_exactly(tmp_path: Path) -> None:
    from summon.local import LocalDaemon

    (tmp_path / "data").mkdir()
    daemon = LocalDaemon(local_ranks=2, data_dir=str(tmp_path / "data")).start()
    try:
        env = dict(os.environ, SUMMON_SERVER=daemon.address, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_ports(1)[0]), WORLD_SIZE="2")
        trainers = [subprocess.Popen([sys.executable, str(REPO / "examples/rl_weight_sync.py"),
                                      "train", "--steps", str(STEPS)],
                                     env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                    for r in range(2)]
        assert [p.wait(timeout=600) for p in trainers] == [0, 0]
        with summon.Client(daemon.address, timeout=30) as client:
            version = client.wait_version("policy", min_step=STEPS, timeout=60)
        assert version == STEPS
        results = run_ranks(tmp_path, (2,), ["rl_example"], {
            "SUMMON_JUDGE_SERVER": daemon.address, "SUMMON_JUDGE_MODEL": "policy",
            "SUMMON_JUDGE_VERSION": str(version)}, timeout_s=900)
    finally:
        daemon.close()
    assert list(results) == [(2, "rl_example/bfloat16<-float32")]
    assert_ranks_hold_the_plan(results[(2, "rl_example/bfloat16<-float32")], 2)
