"""summon.Client against a real summond: every Summon RPC wrapper, error
mapping, chunked reads and writes of every floating dtype, and the
summon_full_params context manager."""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest
import torch

import summon
from summon import dtypes
from summon.v1 import summon_pb2
from seeded import seeded_float32

SEED = 7
LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "embed.w", "shape": [64, 16], "dtype": "float32"},
                           {"fqn": "head.w", "alias_of": "embed.w"}]},
    # 6 MB: more than one 4 MiB chunk and gRPC's default 4 MiB message limit.
    {"fqn": "f32", "params": [{"fqn": "f32.big", "shape": [1500, 1001], "dtype": "float32"},
                              {"fqn": "f32.b", "shape": [7], "dtype": "float32"}]},
    {"fqn": "bf16", "params": [{"fqn": "bf16.w", "shape": [333, 17], "dtype": "bfloat16"}]},
    {"fqn": "f16", "params": [{"fqn": "f16.w", "shape": [129, 31], "dtype": "float16"}]},
]}
TENSORS = {"f32.b": "float32", "f32.big": "float32", "bf16.w": "bfloat16", "f16.w": "float16"}


def stored_seeded(fqn: str, dtype: str, numel: int) -> np.ndarray:
    """The wire data of a seeded tensor (bfloat16 as bits)."""
    values = seeded_float32(fqn, SEED, numel)
    if dtype == "bfloat16":
        return dtypes.float32_to_bfloat16(values)
    return values.astype(dtypes.wire_numpy(dtype))


@pytest.fixture
def model(client: summon.Client) -> str:
    client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
    return "m"


def test_seeded_reference_matches_the_documented_values() -> None:
    values = seeded_float32("layers.1.attn.qkv.weight", 42, 4)
    assert values.view(np.uint32).tolist() == [0xBD5E7F90, 0xBEFDABB8, 0xBD6F08F0, 0xBEC0F136]


def test_bfloat16_conversions_round_to_nearest_even() -> None:
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, 1e-40], np.float32)
    bits = dtypes.float32_to_bfloat16(values)
    # Ties go to even: 1 + 2^-8 to 1.0, 1 + 3*2^-8 to 1 + 2^-6 (not 1 + 2^-7).
    assert bits.tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80, 0x0001]
    assert np.isnan(dtypes.bfloat16_to_float32(dtypes.float32_to_bfloat16(
        np.array([np.nan], np.float32))))[0]
    widened = dtypes.bfloat16_to_float32(bits[:4])
    assert widened.tolist() == [1.0, 1.0, 1.015625, -2.5]
    assert torch.equal(torch.tensor(values[:4]).bfloat16(),
                       torch.from_numpy(bits[:4].view(np.int16)).view(torch.bfloat16))


def test_models_create_list_describe_delete(client: summon.Client, model: str) -> None:
    [summary] = client.list_models()
    assert (summary.name, summary.state, summary.strategy, summary.world_size) == \
        ("m", "READY", "FULL_SHARD", 2)
    assert (summary.unit_count, summary.param_count) == (4, 5)
    assert summary.numel == 64 * 16 + 1500 * 1001 + 7 + 333 * 17 + 129 * 31
    described = client.describe_model("m")
    assert [u.fqn for u in described.units] == ["", "f32", "bf16", "f16"]
    assert described.units[0].params[0].aliases == ("head.w",)
    assert described.unit("bf16").dtype == "bfloat16"
    assert described.params["f32.big"].shape == (1500, 1001)
    assert described.group_size == 2 and described.effective_strategy == "FULL_SHARD"
    assert [r.phase for r in described.ranks] == ["IDLE", "IDLE"]
    unit = described.unit("f16")
    assert unit.chunk_numel == -(-unit.unpadded_numel // 2)

    with pytest.raises(summon.SummonError) as exists:
        client.create_model("m", LAYOUT)
    assert exists.value.code == "ALREADY_EXISTS"
    assert "'m'" in exists.value.message

    client.delete_model("m")
    assert client.list_models() == []
    with pytest.raises(summon.SummonError) as missing:
        client.describe_model("m")
    assert (missing.value.code, missing.value.message) == ("NOT_FOUND", "no model named 'm'")


def test_create_refuses_integer_parameters_r14(client: summon.Client) -> None:
    layout = {"units": [{"fqn": "", "params": [
        {"fqn": "step", "shape": [1], "dtype": "int64"}]}]}
    with pytest.raises(summon.SummonError) as error:
        client.create_model("ints", layout)
    assert error.value.code == "INVALID_ARGUMENT"
    assert "R14" in error.value.message


def test_create_with_strategy_grads_and_zeros(client: summon.Client) -> None:
    model = client.create_model("z", LAYOUT, strategy="no_shard", init="zeros",
                                grad_ranks=[1], grad_init="seeded:3")
    assert model.strategy == "NO_SHARD" and model.group_size == 1
    assert [r.has_grads for r in model.ranks] == [False, True]
    with pytest.raises(ValueError):
        client.create_model("bad", LAYOUT, grad_init="zeros")
    with pytest.raises(ValueError):
        client.create_model("bad", LAYOUT, init="random")


@pytest.mark.parametrize("fqn", list(TENSORS))
def test_reads_match_the_seeded_init(client: summon.Client, model: str, fqn: str) -> None:
    session = client.open_session(model, writeback=False)
    info = next(t for t in session.params if t.fqn == fqn)
    expected = stored_seeded(fqn, info.dtype, info.numel).reshape(info.shape)
    for chunk_bytes in (summon.client.READ_CHUNK_BYTES, 1000):
        if chunk_bytes == 1000 and info.numel > 100_000:
            continue  # 6000 messages: slow, and nothing the small tensors do not show
        data = client.read_tensor(session.id, fqn, chunk_bytes=chunk_bytes)
        assert data.dtype == dtypes.wire_numpy(info.dtype) and data.shape == info.shape
        np.testing.assert_array_equal(data, expected)
    # An element range, into a caller's buffer.
    out = np.empty(5, dtypes.wire_numpy(info.dtype))
    assert client.read_tensor(session.id, fqn, offset=2, count=5, out=out,
                              chunk_bytes=4) is out
    np.testing.assert_array_equal(out, expected.reshape(-1)[2:7])
    with pytest.raises(ValueError):
        client.read_tensor(session.id, fqn, offset=2, count=5, out=np.empty(4, out.dtype))
    client.close_session(session.id)


@pytest.mark.parametrize("fqn", ["f32.b", "bf16.w", "f16.w"])
def test_chunked_write_read_round_trip(client: summon.Client, model: str, fqn: str) -> None:
    session = client.open_session(model, scope=fqn.split(".")[0], writeback=False)
    info = next(t for t in session.params if t.fqn == fqn)
    wire = dtypes.wire_numpy(info.dtype)
    rng = np.random.default_rng(1)
    if info.dtype == "bfloat16":
        data = dtypes.float32_to_bfloat16(rng.standard_normal(info.numel).astype(np.float32))
    else:
        data = rng.standard_normal(info.numel).astype(wire)
    # 999-byte chunks round down to whole elements.
    assert client.write_tensor(session.id, fqn, data.reshape(info.shape),
                               chunk_bytes=999) == info.numel
    np.testing.assert_array_equal(client.read_tensor(session.id, fqn, chunk_bytes=998),
                                  data.reshape(info.shape))
    # A range write lands only where it says.
    patch = data[:3][::-1].copy()
    client.write_tensor(session.id, fqn, patch, offset=1, chunk_bytes=wire.itemsize)
    expected = data.copy()
    expected[1:4] = patch
    np.testing.assert_array_equal(client.read_tensor(session.id, fqn).reshape(-1), expected)
    client.close_session(session.id)


def test_context_manager_writes_back_on_normal_exit(client: summon.Client, model: str) -> None:
    with client.summon_full_params(model, scope="f16") as s:
        assert s.keys() == ["f16.w"] and "f16.w" in s and len(s) == 1
        w = s["f16.w"]
        assert w.dtype == np.float16
        s["f16.w"] = w * 2
    assert s.close_result.written_back and s.close_result.bytes_written == w.nbytes
    assert client.list_sessions() == []
    with client.summon_full_params(model, scope="f16", writeback=False) as s:
        np.testing.assert_array_equal(s["f16.w"], w * 2)
    assert not s.close_result.written_back


def test_context_manager_aborts_on_exception(client: summon.Client, model: str) -> None:
    with pytest.raises(RuntimeError, match="changed my mind"):
        with client.summon_full_params(model, scope="f32") as s:
            before = s["f32.b"]
            s["f32.b"] = before + 1
            raise RuntimeError("changed my mind")
    assert not s.close_result.written_back
    assert client.list_sessions() == []
    with client.summon_full_params(model, params=["f32.b"], writeback=False) as s:
        np.testing.assert_array_equal(s["f32.b"], before)


def test_bfloat16_values_torch_and_rounding_writes(client: summon.Client, model: str) -> None:
    with client.summon_full_params(model, scope="bf16") as s:
        bits = s.read("bf16.w", raw=True)
        assert bits.dtype == np.uint16
        values = s["bf16.w"]
        assert values.dtype == np.float32
        np.testing.assert_array_equal(values, dtypes.bfloat16_to_float32(bits))
        tensor = s.torch("bf16.w")
        assert tensor.dtype == torch.bfloat16 and tuple(tensor.shape) == (333, 17)
        assert torch.equal(tensor.float(), torch.from_numpy(values))
        s["bf16.w"] = values / 3  # float32: rounded to nearest even
        np.testing.assert_array_equal(s.read("bf16.w", raw=True),
                                      dtypes.float32_to_bfloat16(values / 3))
        s["bf16.w"] = tensor * 2  # a torch.bfloat16 tensor: its bits
        assert torch.equal(s.torch("bf16.w"), tensor * 2)


def test_session_rpcs_and_options(client: summon.Client, model: str) -> None:
    opened = client.open_session(model, params=["f32.b", "head.w"], writeback=False,
                                 with_grads=True, read_dtype="float16", lease_seconds=30)
    assert [t.fqn for t in opened.params] == ["embed.w", "f32.b"]
    assert opened.options.params == ("f32.b", "head.w")
    assert opened.options.read_dtype == "float16" and opened.options.lease_seconds == 30
    assert opened.grads == ()  # the model has no gradient shards
    assert opened.state == "OPEN" and opened.owner == "anonymous"
    got = client.get_session(opened.id)
    assert got.id == opened.id and got.model == model
    assert {g.unit for g in got.gathered_generations} == {"", "f32"}
    assert [s.id for s in client.list_sessions(model)] == [opened.id]
    renewed = client.renew_session(opened.id, lease_seconds=600)
    assert renewed.options.lease_seconds == 600
    assert renewed.expires_at_unix_ms > opened.expires_at_unix_ms
    half = client.read_tensor(opened.id, "f32.b")
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, seeded_float32("f32.b", SEED, 7).astype(np.float16))
    assert client.close_session(opened.id).written_back is False
    with pytest.raises(summon.SummonError) as gone:
        client.get_session(opened.id)
    # R25: an ended session says why and when it ended.
    assert gone.value.code == "FAILED_PRECONDITION"
    assert re.fullmatch(rf"session {opened.id} ended at \S+Z: closed", gone.value.message)

    module = client.open_session(model, scope="", recurse=False, rank0_only=True,
                                 home_rank=1, offload_to_cpu=True)
    assert [t.fqn for t in module.params] == ["embed.w"]
    assert module.options.rank0_only and module.options.home_rank == 1
    assert module.options.writeback and not module.options.recurse
    client.close_session(module.id, abort=True)


def test_stats_are_computed_where_the_data_is(client: summon.Client, model: str) -> None:
    with client.summon_full_params(model, scope="f32", writeback=False) as s:
        [stats] = s.stats("f32.b", bins=4)
        data = s["f32.b"].astype(np.float64)
        assert stats.info.fqn == "f32.b" and stats.info.shape == (7,)
        assert stats.min == data.min() and stats.max == data.max()
        assert stats.l2_norm == pytest.approx(np.linalg.norm(data), rel=1e-12)
        assert stats.mean == pytest.approx(data.mean(), rel=1e-12)
        assert stats.nan_count == 0 and stats.inf_count == 0
        assert sum(stats.histogram.counts) == 7 and len(stats.histogram.counts) == 4
        assert [t.info.fqn for t in s.stats()] == ["f32.big", "f32.b"]


def test_checksum_save_and_load(client: summon.Client, model: str) -> None:
    checksums = client.model_checksum(model)
    assert [(c.rank, c.unit) for c in checksums] == [
        (r, u) for r in (0, 1) for u in ("", "f32", "bf16", "f16")]
    assert all(c.grads is None for c in checksums)
    saved = client.save_model(model, "m.safetensors")
    assert len(saved.files) == 1 and saved.files[0].endswith("m.safetensors")
    assert saved.bytes_written > 6_000_000
    with pytest.raises(summon.SummonError) as exists:
        client.save_model(model, "m.safetensors")
    assert exists.value.code == "ALREADY_EXISTS"
    client.save_model(model, "m.safetensors", overwrite=True)

    with client.summon_full_params(model, scope="f32") as s:
        s["f32.b"] = np.zeros(7, np.float32)
    assert client.model_checksum(model) != checksums
    loaded = client.load_model(model, "m.safetensors")
    assert loaded.bytes_read > 6_000_000
    assert [(c.rank, c.unit, c.params) for c in client.model_checksum(model)] == \
        [(c.rank, c.unit, c.params) for c in checksums]

    created = client.load_model("copy", "m.safetensors", wrap=["f32", "bf16", "f16"],
                                strategy="shard_grad_op", use_orig_params=False)
    assert created.model.strategy == "SHARD_GRAD_OP" and not created.model.use_orig_params
    with client.summon_full_params("copy", params=["f16.w"], writeback=False) as s:
        np.testing.assert_array_equal(s["f16.w"], stored_seeded("f16.w", "float16", 129 * 31)
                                      .reshape(129, 31))


def test_delete_refused_while_a_session_is_open(client: summon.Client, model: str) -> None:
    with client.summon_full_params(model, scope="f16", writeback=False):
        with pytest.raises(summon.SummonError) as busy:
            client.delete_model(model)
        assert busy.value.code == "FAILED_PRECONDITION"
    client.delete_model(model)


def test_principals_own_sessions_r12(daemon, model: str) -> None:
    alice = summon.Client(daemon.address, principal="alice")
    bob = summon.Client(daemon.address, principal="bob")
    session = alice.open_session(model, scope="f16", writeback=False)
    assert session.owner == "alice"
    with pytest.raises(summon.SummonError) as denied:
        bob.read_tensor(session.id, "f16.w")
    assert denied.value.code == "PERMISSION_DENIED" and "alice" in denied.value.message
    assert bob.list_sessions() == []
    alice.close_session(session.id)
    alice.close()
    bob.close()


def test_errors_map_to_status_names(client: summon.Client, model: str) -> None:
    session = client.open_session(model, scope="f32")
    cases = [
        (lambda: client.read_tensor(session.id, "nosuch"), "NOT_FOUND"),
        (lambda: client.read_tensor(session.id, "f32.b", offset=8), "OUT_OF_RANGE"),
        (lambda: client.write_tensor(session.id, "f32.b", np.zeros(7, np.float16)),
         "INVALID_ARGUMENT"),  # another dtype (R5)
        (lambda: client.write_tensor(session.id, "f32.b", np.zeros(3, np.float32), offset=5),
         "OUT_OF_RANGE"),
        (lambda: client.open_session(model, scope="f32"), "FAILED_PRECONDITION"),  # R2
        (lambda: client.open_session(model, scope="nosuch"), "NOT_FOUND"),
        (lambda: client.renew_session(session.id, lease_seconds=0), "INVALID_ARGUMENT"),
        (lambda: client.close_session("s-0000000000000000"), "NOT_FOUND"),
    ]
    for call, code in cases:
        with pytest.raises(summon.SummonError) as error:
            call()
        assert error.value.code == code, error.value
        assert str(error.value) == f"{code}: {error.value.message}"
    client.close_session(session.id, abort=True)

    with pytest.raises(summon.SummonError) as unreachable:
        summon.Client("127.0.0.1:1", timeout=5).list_models()
    assert unreachable.value.code == "UNAVAILABLE"


def test_lease_is_renewed_in_the_background(client: summon.Client, model: str) -> None:
    with client.summon_full_params(model, scope="f16", writeback=False,
                                   lease_seconds=1) as s:
        time.sleep(2.2)  # twice the lease: only the renewals keep it alive
        assert client.get_session(s.id).state == "OPEN"
        assert s.renew_error is None


def test_map_session_reads_the_seeded_copy_read_only(client: summon.Client, model: str) -> None:
    """MapSession (issue 11 P3): every tensor of the mapping, element for element."""
    session = client.open_session(model, writeback=False)
    with client.map_session(session.id) as mapping:
        assert set(mapping.tensors) == {"embed.w", *TENSORS}  # Aliases go by their primary.
        for info in session.params:
            expected = stored_seeded(info.fqn, info.dtype, info.numel).reshape(info.shape)
            view = mapping[info.fqn]
            assert view.dtype == dtypes.wire_numpy(info.dtype) and view.shape == info.shape
            np.testing.assert_array_equal(view, expected)
            assert not view.flags["WRITEABLE"]
            with pytest.raises(ValueError):
                view[(0,) * view.ndim] = 1  # The mapping is read-only.
            out = np.empty(info.shape, view.dtype)
            assert mapping.read(info.fqn, out=out) is out
            np.testing.assert_array_equal(out, expected)
        del view
    with pytest.raises(summon.SummonError) as error:
        client.map_session(session.id, grad=True)
    assert error.value.code == "NOT_FOUND"
    client.close_session(session.id)
    with pytest.raises(summon.SummonError) as error:
        client.map_session(session.id)
    assert error.value.code == "FAILED_PRECONDITION"  # R25: it was closed.


def test_map_session_refuses_writable_sessions(client: summon.Client, model: str) -> None:
    session = client.open_session(model, scope="f16")
    with pytest.raises(summon.SummonError) as error:
        client.map_session(session.id)
    assert error.value.code == "FAILED_PRECONDITION" and "writable" in str(error.value)
    client.close_session(session.id, abort=True)


def test_device_copies_are_only_for_copies_in_gpu_memory(client: summon.Client,
                                                        model: str) -> None:
    """A host copy has no CUDA IPC handles; the error says to map it instead."""
    session = client.open_session(model, scope="f16", writeback=False)
    with pytest.raises(summon.SummonError) as error:
        client.grant_device_copies(session.id)
    assert error.value.code == "FAILED_PRECONDITION" and "map_session" in str(error.value)
    with client.map_session(session.id) as mapping:  # The host copy still maps.
        assert set(mapping.tensors) == {"f16.w"}
    client.close_session(session.id)


def test_a_map_token_is_good_once(client: summon.Client, model: str) -> None:
    from summon.mapping import redeem
    session = client.open_session(model, scope="f16", writeback=False)
    grant = client._call(client._summon.MapSession,
                         summon_pb2.MapSessionRequest(session_id=session.id))
    os.close(redeem(grant.socket, grant.token))
    with pytest.raises(summon.SummonError) as error:
        redeem(grant.socket, grant.token)
    assert error.value.code == "FAILED_PRECONDITION" and "used or expired" in str(error.value)
    client.close_session(session.id)
