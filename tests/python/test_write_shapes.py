"""Exact shapes on every Python write path (issue 23): a whole-tensor write
carries exactly the tensor's shape or is refused with INVALID_ARGUMENT naming
both shapes, before anything is sent; a partial write names its range. Also
the client's other checks before sending: an address without a port, a
model name outside the daemon's rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import summon

LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "w", "shape": [48, 16], "dtype": "float32"},
                           {"fqn": "tied", "alias_of": "w"}]},
    {"fqn": "b", "params": [{"fqn": "b.v", "shape": [20], "dtype": "float32"}]},
]}


@pytest.fixture
def model(client: summon.Client) -> str:
    client.create_model("shapes", LAYOUT, init="seeded:3")
    return "shapes"


def refused(call, *shapes: str) -> summon.SummonError:
    with pytest.raises(summon.SummonError) as error:
        call()
    assert error.value.code == "INVALID_ARGUMENT", error.value
    for shape in shapes:
        assert shape in error.value.message, error.value.message
    return error.value


def test_setitem_refuses_a_transposed_array_and_writes_nothing(
        client: summon.Client, model: str) -> None:
    with client.summon_full_params(model, scope="") as s:
        before = s["w"].copy()
        transposed = np.arange(768, dtype=np.float32).reshape(16, 48)
        refused(lambda: s.__setitem__("w", transposed), "[48, 16]", "[16, 48]")
        refused(lambda: s.__setitem__("w", transposed.reshape(-1)), "[768]")
        # No broadcast of a scalar or a row either.
        refused(lambda: s.__setitem__("w", np.float32(1.0)), "[]")
        refused(lambda: s.__setitem__("w", np.ones(16, np.float32)), "[16]")
        np.testing.assert_array_equal(s["w"], before)
        s["w"] = before * 2  # the exact shape still writes
        np.testing.assert_array_equal(s["w"], before * 2)
    assert s.close_result is not None and s.close_result.written_back


def test_torch_tensor_writes_need_the_exact_shape(client: summon.Client, model: str) -> None:
    with client.summon_full_params(model, scope="b") as s:
        before = s["b.v"].copy()
        refused(lambda: s.__setitem__("b.v", torch.zeros(4, 5)), "[20]", "[4, 5]")
        np.testing.assert_array_equal(s["b.v"], before)
        s["b.v"] = torch.arange(20, dtype=torch.float32)
        np.testing.assert_array_equal(s["b.v"], np.arange(20, dtype=np.float32))


def test_write_tensor_refuses_a_short_whole_write(client: summon.Client, model: str) -> None:
    session = client.open_session(model, scope="b", writeback=False)
    before = client.read_tensor(session.id, "b.v")
    error = refused(lambda: client.write_tensor(session.id, "b.v", np.ones(10, np.float32)),
                    "[20]", "[10]")
    assert "offset=" in error.message
    np.testing.assert_array_equal(client.read_tensor(session.id, "b.v"), before)
    # A range says where it goes, and lands only there.
    assert client.write_tensor(session.id, "b.v", np.ones(10, np.float32), offset=5,
                               count=10) == 10
    expected = before.copy()
    expected[5:15] = 1
    np.testing.assert_array_equal(client.read_tensor(session.id, "b.v"), expected)
    refused(lambda: client.write_tensor(session.id, "b.v", np.ones(3, np.float32),
                                        offset=0, count=4), "count=4")
    refused(lambda: client.write_tensor(session.id, "b.v", np.ones(3, np.float32),
                                        count=3), "offset=")
    with pytest.raises(summon.SummonError) as outside:
        client.write_tensor(session.id, "b.v", np.ones(3, np.float32), offset=18)
    assert outside.value.code == "OUT_OF_RANGE"
    client.close_session(session.id)


def test_write_tensor_checks_an_alias_against_its_primary(
        client: summon.Client, model: str) -> None:
    session = client.open_session(model, params=["w"], writeback=False)
    refused(lambda: client.write_tensor(session.id, "tied", np.zeros((16, 48), np.float32)),
            "[48, 16]", "[16, 48]")
    assert client.write_tensor(session.id, "tied", np.zeros((48, 16), np.float32)) == 768
    client.close_session(session.id)


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost", "::1", "[::1]", "h:0", "h:x"])
def test_an_address_without_a_port_is_refused(address: str) -> None:
    with pytest.raises(summon.SummonError) as error:
        summon.Client(address)
    assert error.value.code == "INVALID_ARGUMENT"
    assert error.value.message == (f"address '{address}' names no port: write HOST:PORT "
                                   "(127.0.0.1:7070, [::1]:7070) or unix:PATH")


def test_addresses_with_a_port_or_scheme_pass() -> None:
    for address in ("127.0.0.1:7070", "[::1]:7070", "unix:/run/summon.sock", "dns:h:1"):
        summon.Client(address).close()


def test_model_names_follow_the_daemons_rule(client: summon.Client) -> None:
    client.create_model("m" * 128, LAYOUT)
    for bad in ("m" * 129, "a/b", "..", ""):
        with pytest.raises(summon.SummonError) as error:
            client.create_model(bad, LAYOUT)
        assert error.value.code == "INVALID_ARGUMENT"
        assert error.value.message == (f"model name '{bad}': use 1 to 128 of "
                                       "A-Z a-z 0-9 . _ - (not '.' or '..')")


def test_trainer_copy_from_a_module_of_another_shape_is_refused(client: summon.Client) -> None:
    import summon.torch as st
    torch.manual_seed(5)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    st.register(client, "t", net, [net[0], net[1]])
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))  # [3, 4] weights
    with st.attach(client, "t", [0, 1]) as trainer:
        before = [p.detach().clone() for p in trainer.shard_views(0).parameters()]
        with pytest.raises(summon.SummonError) as error:
            trainer.shard_views(0).copy_from_module(other)
        assert error.value.code == "INVALID_ARGUMENT"
        assert "'0.weight' has shape [4, 3], the data has shape [3, 4]" in error.value.message
        after = trainer.shard_views(0).parameters()
        assert all(torch.equal(a, b) for a, b in zip(before, after))
