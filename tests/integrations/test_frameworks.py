"""Each framework trains a tiny Llama with FSDP2 (the Hugging Face Trainer,
Accelerate and Lightning also FSDP1; torchtitan its own Llama3 through its
own parallelize_llama, titan.py) on gloo (W = 2), served by summon's
integration; a session from this process equals the framework's own
full parameters bit for bit, and an edit through the session changed training
exactly as the same edit through the framework did (worker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import summon
import torch

from .conftest import WORKER, base, run  # noqa: F401

PARAMETERS = 21  # the tiny Llama: 2 layers x 9, embed, final norm, head
TITAN_PARAMETERS = 45  # torchtitan's debugmodel: 6 layers x 7, embed, norm, head
MODES = ("hf", "hf-fsdp1", "accelerate", "accelerate-fsdp1", "lightning",
         "lightning-fsdp1", "torchtitan")
FSDP1 = "fsdp1 FlatParameter 3"  # 2 layers and the root
SHARDING = {"hf-fsdp1": FSDP1, "accelerate-fsdp1": FSDP1, "lightning-fsdp1": FSDP1,
            "torchtitan": f"fsdp2 Shard(0) {TITAN_PARAMETERS}"}
# A parameter of the last layer, by the name the framework's model gives it.
LAST_LAYER = {"lightning": "model.model.layers.1.self_attn.q_proj.weight",
              "lightning-fsdp1": "model.model.layers.1.self_attn.q_proj.weight",
              "torchtitan": "layers.5.attention.qkv_linear.wqkv.weight"}


@pytest.fixture(scope="module")
def jobs(daemons, tmp_path_factory):
    """(client, out); a framework's job runs the first time load() asks for it."""
    out = tmp_path_factory.mktemp("frameworks")
    daemon = daemons(2)
    client = summon.Client(daemon.address)
    yield client, out, daemon
    for mode in MODES:
        base.delete_model(client, f"int-{mode}")
    client.close()


def load(jobs, mode: str) -> dict:
    """The results of the framework's job (one per framework: each starts its
    own process group and framework state)."""
    _, out, daemon = jobs
    if not (out / f"int-{mode}.pt").exists():
        run(daemon, 2, [{"mode": mode, "name": f"int-{mode}"}], out)
    return torch.load(out / f"int-{mode}.pt")


@pytest.mark.parametrize("mode", MODES)
def test_model_really_is_sharded(jobs, mode):
    result = load(jobs, mode)
    expected = SHARDING.get(mode, f"fsdp2 Shard(0) {PARAMETERS}")
    assert result["served"]["sharding"] == expected
    assert result["plain"]["sharding"] == expected


@pytest.mark.parametrize("mode", MODES)
def test_session_equals_framework(jobs, mode):
    client, name = jobs[0], f"int-{mode}"
    params = load(jobs, mode)["served"]["params"]
    assert LAST_LAYER.get(mode, "model.layers.1.self_attn.q_proj.weight") in params
    assert client.describe_model(name).state == "READY"
    expected = TITAN_PARAMETERS if mode == "torchtitan" else PARAMETERS
    assert base.assert_session_equals(client, name, params) == expected


@pytest.mark.parametrize("mode", MODES)
def test_outside_edit_equals_framework_edit(jobs, mode):
    result = load(jobs, mode)
    served, plain = result["served"]["params"], result["plain"]["params"]
    assert served.keys() == plain.keys()
    for fqn, tensor in plain.items():
        assert torch.equal(served[fqn], tensor), fqn


@pytest.mark.parametrize("mode", MODES)
def test_phases_from_framework_events(jobs, mode):
    """At the optimizer step serve's trainer and summond have the rank in
    OPTIMIZER, after it IDLE with the step counted (HF and Lightning: their
    own events; Accelerate and torchtitan: the optimizer's hooks, read after
    each step)."""
    phases = [tuple(p) for p in load(jobs, mode)["served"]["phases"]]
    if mode.startswith("accelerate") or mode == "torchtitan":
        assert phases == [("IDLE", "IDLE", s) for s in (1, 2, 3)]
    else:
        assert phases == [p for s in (1, 2, 3)
                          for p in (("OPTIMIZER", "OPTIMIZER", s - 1), ("IDLE", "IDLE", s))]


@pytest.mark.parametrize("mode", MODES)
def test_four_phase_calls_per_step(jobs, mode):
    """Each served step makes exactly 4 ReportPhase calls on the training
    thread: BETWEEN rides with BACKWARD (issue 35c), nothing is repeated."""
    calls = [tuple(c) for c in load(jobs, mode)["served"]["calls"]]
    assert calls == [(None, "FORWARD"), ("BETWEEN", "BACKWARD"), (None, "OPTIMIZER"),
                     (None, "IDLE")] * 3
