"""summon.torch's trainer side against a real summond: the Trainer RPC wrappers,
R1, R3 (refused or waiting, as asked), R4, R6, leases, init external, the
external-write callback and WatchUnits, and views that survive a daemon
restart."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import summon
import summon.torch as st


def tiny() -> torch.nn.Module:
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


@pytest.fixture
def model(client: summon.Client) -> str:
    net = tiny()
    st.register(client, "t", net, [net[0], net[1]])
    return "t"


@pytest.fixture
def trainer(client: summon.Client, model: str):
    with st.attach(client, model, [0, 1], lease_seconds=5) as t:
        yield t


def phases(client: summon.Client, model: str) -> list[str]:
    return [r.phase for r in client.describe_model(model).ranks]


def test_trainer_rpc_wrappers(client: summon.Client, model: str) -> None:
    report = client.report_phase(model, 0, "forward", step=1)  # unattached ranks need no lease
    assert (report.previous_phase, report.phase, report.step) == ("IDLE", "FORWARD", 1)
    assert [g.unit for g in report.generations] == ["", "0", "1"]
    client.report_phase(model, 0, "IDLE")
    with pytest.raises(summon.SummonError) as illegal:
        client.report_phase(model, 0, "BACKWARD")
    assert illegal.value.code == "FAILED_PRECONDITION" and "IDLE to BACKWARD" in \
        illegal.value.message

    shard_map = client.map_shards(model, 1)
    assert (shard_map.rank, shard_map.world_size, shard_map.state) == (1, 2, "READY")
    assert shard_map.segment_name.startswith("/summon-") and shard_map.grads_segment_name
    assert [u.position for u in shard_map.units] == [1, 1, 1]
    assert shard_map.units[1].layout[0].fqn == "0.weight"

    attachment = client.attach(model, [0, 1], "me", lease_seconds=3)
    assert attachment.lease_seconds == 3 and not attachment.resumed
    assert [r.trainer_incarnation for r in client.describe_model(model).ranks] == ["me", "me"]
    assert [u.unit for u in client.heartbeat(attachment.lease_id)] == ["", "0", "1"]
    with pytest.raises(summon.SummonError) as taken:
        client.attach(model, [1], "someone-else")
    assert taken.value.code == "ALREADY_EXISTS"
    with pytest.raises(summon.SummonError) as no_lease:
        client.report_phase(model, 0, "FORWARD")
    assert no_lease.value.code == "FAILED_PRECONDITION"
    assert client.attach(model, [0, 1], "me").resumed
    with pytest.raises(summon.SummonError) as ready:
        client.mark_initialized(model, attachment.lease_id)
    assert ready.value.code == "FAILED_PRECONDITION"
    client.detach(attachment.lease_id)
    with pytest.raises(summon.SummonError) as ended:
        client.heartbeat(attachment.lease_id)
    assert ended.value.code == "FAILED_PRECONDITION"

    watch = client.watch_units(model)
    first = next(iter(watch))
    assert [u.unit for u in first] == ["", "0", "1"]
    watch.cancel()


def test_step_reports_every_phase(client: summon.Client, model: str, trainer) -> None:
    seen = []
    with trainer.step(1) as step:
        seen.append(phases(client, model))
        step.between()
        seen.append(phases(client, model))
        step.backward()
        seen.append(phases(client, model))
        step.optimizer()
        seen.append(phases(client, model))
    seen.append(phases(client, model))
    assert [s[0] for s in seen] == ["FORWARD", "BETWEEN", "BACKWARD", "OPTIMIZER", "IDLE"]
    assert all(s[0] == s[1] for s in seen)
    assert [r.step for r in client.describe_model(model).ranks] == [1, 1]
    # An exception mid-step returns the ranks to IDLE along legal moves.
    with pytest.raises(ZeroDivisionError):
        with trainer.step(2) as step:
            step.between()
            1 / 0
    assert phases(client, model) == ["IDLE", "IDLE"]
    with trainer.step(3):  # an eval step: FORWARD -> IDLE
        pass
    assert phases(client, model) == ["IDLE", "IDLE"]


def test_r1_no_session_opens_during_forward(client: summon.Client, model: str,
                                             trainer) -> None:
    with trainer.step(1) as step:
        for writeback in (True, False):
            with pytest.raises(summon.SummonError) as refused:
                client.open_session(model, scope="0", writeback=writeback)
            assert refused.value.code == "FAILED_PRECONDITION"
            assert "FORWARD" in refused.value.message
        step.between()  # FULL_SHARD: sessions open in BETWEEN
        with client.summon_full_params(model, scope="0"):
            pass
        step.backward()
    with client.summon_full_params(model, scope="0"):
        pass


def test_r3_a_step_is_refused_or_waits_as_asked(client: summon.Client, model: str,
                                                trainer) -> None:
    session = client.open_session(model, scope="1")  # writable
    with pytest.raises(summon.SummonError) as refused:
        with trainer.step(1, wait=None):
            pass
    assert refused.value.code == "FAILED_PRECONDITION"
    assert session.id in refused.value.message
    assert phases(client, model) == ["IDLE", "IDLE"]

    with pytest.raises(summon.SummonError) as late:
        with trainer.step(1, wait=0.3):
            pass
    assert late.value.code == "DEADLINE_EXCEEDED"

    closer = threading.Timer(0.5, lambda: client.close_session(session.id))
    closer.start()
    with trainer.step(1, wait=10) as step:
        assert phases(client, model) == ["FORWARD", "FORWARD"]
        assert step.waited_ms >= 300
    closer.join()


def test_r3_default_wait_comes_from_the_trainer(client: summon.Client, model: str) -> None:
    with st.attach(client, model, [0, 1], wait=10) as patient:
        session = client.open_session(model, scope="0")
        threading.Timer(0.3, lambda: client.close_session(session.id)).start()
        with patient.step(1):
            pass


def test_r6_read_only_sessions_do_not_block_training(client: summon.Client, model: str,
                                                     trainer) -> None:
    with client.summon_full_params(model, writeback=False) as s:
        with trainer.step(1) as step:
            step.optimizer()
        assert s["0.bias"].shape == (4,)


def test_r4_no_writable_session_between_under_shard_grad_op(client: summon.Client) -> None:
    net = tiny()
    st.register(client, "sgo", net, [net[0], net[1]], strategy="SHARD_GRAD_OP")
    with st.attach(client, "sgo", [0, 1]) as trainer, trainer.step(1) as step:
        step.between()
        with pytest.raises(summon.SummonError) as refused:
            client.open_session("sgo", scope="0")
        assert refused.value.code == "FAILED_PRECONDITION"
        assert "SHARD_GRAD_OP" in refused.value.message
        with client.summon_full_params("sgo", scope="0", writeback=False):
            pass


def test_init_external_from_the_trainer(client: summon.Client) -> None:
    net = tiny()
    created = st.register(client, "ext", net, [net[0], net[1]], fill=False)
    assert created.state == "AWAITING_INIT"
    with pytest.raises(summon.SummonError) as waiting:
        client.open_session("ext")
    assert waiting.value.code == "FAILED_PRECONDITION"
    assert "AWAITING_INIT" in waiting.value.message
    with st.attach(client, "ext", [0, 1]) as trainer:
        trainer.init_from_module(net)  # drives every rank: also marks it initialised
    assert client.describe_model("ext").state == "READY"
    with client.summon_full_params("ext", writeback=False) as s:
        for fqn, param in net.named_parameters():
            np.testing.assert_array_equal(s[fqn], param.detach().numpy())


def test_external_edits_reach_the_callback_and_the_watch(client: summon.Client,
                                                         model: str) -> None:
    calls = []
    with st.attach(client, model, [0, 1],
                   on_external_write=lambda t, units: calls.append([u.unit for u in units])
                   ) as trainer:
        views = trainer.shard_views(1)
        for step in (1, 2):  # the trainer's own optimizer steps are not external
            with trainer.step(step) as phase:
                phase.optimizer()
                views["0"].params.add_(1.0)
        assert calls == [] and trainer.pending_external_writes() == []

        with client.summon_full_params(model, scope="1") as s:  # an inspector edits
            s["1.weight"] = s["1.weight"] * 2
        assert trainer.external_edit.wait(5), "WatchUnits did not report the writeback"
        assert trainer.pending_external_writes() == ["1"]

        with trainer.step(3):
            pass
        assert calls == [["1"]]
        assert trainer.pending_external_writes() == [] and not trainer.external_edit.is_set()
        with trainer.step(4):
            pass
        assert calls == [["1"]]


def test_a_lapsed_lease_returns_the_ranks_to_idle(client: summon.Client, model: str) -> None:
    dead = client.attach(model, [0], "dead-trainer", lease_seconds=1)
    client.report_phase(model, 0, "FORWARD", step=7, lease_id=dead.lease_id)
    assert phases(client, model)[0] == "FORWARD"
    deadline = time.monotonic() + 5
    while phases(client, model)[0] != "IDLE" and time.monotonic() < deadline:
        time.sleep(0.1)
    rank = client.describe_model(model).ranks[0]
    assert rank.phase == "IDLE" and "lapsed" in rank.last_event
    with st.attach(client, model, [0]) as trainer:  # a new incarnation takes over
        assert trainer.attachment.previous_incarnation in ("dead-trainer", "")


def test_views_stay_valid_across_a_daemon_restart(start_daemon) -> None:
    daemon = start_daemon(local_ranks=2, unix_socket=True)
    client = summon.Client(daemon.address, timeout=30)
    net = tiny()
    st.register(client, "r", net, [net[0], net[1]])
    trainer = st.attach(client, "r", [0, 1], lease_seconds=10)
    views = [trainer.shard_views(rank) for rank in (0, 1)]
    with trainer.step(1) as step:
        step.optimizer()
        views[0]["0"].params.mul_(2)

    daemon.restart()

    for view in views:  # written through mappings made before the restart
        view["0"].params.add_(1)
    with trainer.step(2) as step:  # same lease, same socket
        step.optimizer()
        for view in views:
            view["1"].params.mul_(3)
    assert trainer.lease_error is None
    fresh = st.ShardViews(client.map_shards("r", 0))
    assert fresh.map.segment_name == views[0].map.segment_name
    assert fresh.map.incarnation == views[0].map.incarnation
    weight, bias = net[0].weight.detach(), net[0].bias.detach()
    with client.summon_full_params("r", writeback=False) as s:
        flat = torch.cat([weight.reshape(-1), bias])
        owned0 = views[0]["0"].shard.unpadded_numel
        first = views[0]["0"].shard.chunk_numel
        expected = flat.clone()
        expected[:first] = flat[:first] * 2 + 1
        expected[first:owned0] = flat[first:owned0] + 1
        got = torch.cat([torch.from_numpy(s["0.weight"]).reshape(-1),
                         torch.from_numpy(s["0.bias"])])
        assert torch.equal(got, expected)
        np.testing.assert_array_equal(s["1.weight"], net[1].weight.detach().numpy() * 3)
    trainer.detach()
    client.close()
