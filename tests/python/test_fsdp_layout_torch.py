"""summon's layouts judged by torch's own FSDP (torch 2.x, CPU, gloo, W = 2 and 4).

fsdp_truth runs real FSDP2 (`fully_shard`: plain, reshard_after_forward
False, a dim-1 `shard_placement_fn`, HSDP on a (2, 2) mesh) and FSDP1
(`FullyShardedDataParallel`: every strategy, use_orig_params both ways) over
summon's seeded values and records what each rank holds. Here summond gets
the same model as a layout file with the same seeded init, and for every
rank and unit MapShards must describe torch's storage exactly (each FSDP2
parameter's offset, padded and unpadded local shape, shard dim; each FSDP1
FlatParameter's _shard_param_infos and size) and the shard's raw bytes must
be torch's, padding included. Sessions must gather torch's full tensors.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import summon
import fsdp_truth
from fsdp_truth import SEED, UNITS
from seeded import seeded_float32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=[2, 4], ids=["W2", "W4"])
def truth(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, list[Any]]]:
    world = request.param
    out = tmp_path_factory.mktemp(f"fsdp-truth-{world}")
    return world, fsdp_truth.record(world, out, _free_port())


def _unit_of(fqn: str) -> str:
    """The deepest unit above a parameter."""
    return max((u for u in UNITS if u == "" or fqn.startswith(u + ".")), key=len)


def _layout(kind: str, world: int, options: dict[str, Any]) -> dict[str, Any]:
    """The layout file of fsdp_truth.Net as summon reads it, written from the
    module alone (named_parameters order within each unit)."""
    net = fsdp_truth.Net()
    group = options.get("shard_group_size") or world
    rule = fsdp_truth.dim1_rule(group)
    units: dict[str, list[dict[str, Any]]] = {u: [] for u in UNITS}
    for name, param in net.named_parameters():
        entry: dict[str, Any] = {"fqn": name, "shape": list(param.shape), "dtype": "float32"}
        if kind == "fsdp2" and options.get("dim1") and rule(param) == 1:
            entry["shard_dim"] = 1
        units[_unit_of(name)].append(entry)
    layout: dict[str, Any] = {"units": [{"fqn": u, "params": p} for u, p in units.items()]}
    if kind == "fsdp2":
        layout["kind"] = "fsdp2"
        layout["strategy"] = "FULL_SHARD" if options.get("reshard", True) else "SHARD_GRAD_OP"
    else:
        layout["use_orig_params"] = options["use_orig_params"]
        layout["strategy"] = options["strategy"]
    if "shard_group_size" in options:
        layout["strategy"] = "HYBRID_SHARD"
        layout["shard_group_size"] = options["shard_group_size"]
    elif options.get("strategy") == "HYBRID_SHARD":
        layout["shard_group_size"] = 2  # fsdp_truth's (W / 2, 2) mesh.
    return layout


def _shard_bytes(shard_map: summon.ShardMap, unit: Any) -> bytes:
    path = Path("/dev/shm") / shard_map.segment_name.lstrip("/")
    return np.fromfile(path, dtype=np.float32, count=unit.chunk_numel,
                       offset=unit.params_offset).tobytes()


def _check_sessions_gather_seeded_values(client: summon.Client, model: str) -> None:
    session = client.open_session(model, writeback=False)
    try:
        for tensor in session.params:
            expected = seeded_float32(tensor.fqn, SEED, tensor.numel).reshape(tensor.shape)
            np.testing.assert_array_equal(client.read_tensor(session.id, tensor.fqn), expected)
    finally:
        client.close_session(session.id)


def _each_case(truth: tuple[int, dict[str, list[Any]]], kind: str,
               start_daemon: Callable[..., Any],
               check: Callable[[summon.Client, str, int, list[Any]], None]) -> int:
    world, records = truth
    daemon = start_daemon(local_ranks=world)
    checked = 0
    with summon.Client(daemon.address, timeout=60) as client:
        for name, (case_kind, options) in fsdp_truth.cases(world).items():
            if case_kind != kind:
                continue
            model = name.replace("_", "-")
            client.create_model(model, _layout(kind, world, options), init=f"seeded:{SEED}")
            for rank in range(world):
                check(client, model, rank, records[name][rank])
            _check_sessions_gather_seeded_values(client, model)
            client.delete_model(model)
            checked += 1
    return checked


def test_fsdp2_shards_are_torchs_fsdp_params(truth, start_daemon) -> None:
    def check(client: summon.Client, model: str, rank: int, torch_units: Any) -> None:
        assert client.describe_model(model).layout_kind == "fsdp2"
        shard_map = client.map_shards(model, rank)
        assert [u.unit for u in shard_map.units] == UNITS
        for unit in shard_map.units:
            params = torch_units[unit.unit]
            assert unit.kind == "fsdp2"
            where = f"{model} rank {rank} unit '{unit.unit}'"
            assert [p.info.fqn for p in unit.params] == [p["fqn"] for p in params], where
            offset = 0
            for mine, theirs in zip(unit.params, params):
                assert mine.info.shape == theirs["shape"], where
                assert mine.offset_in_shard == offset, (where, mine.info.fqn)
                assert mine.padded_local_shape == theirs["padded"], (where, mine.info.fqn)
                assert mine.local_shape == theirs["local"], (where, mine.info.fqn)
                assert mine.shard_dim == theirs["dim"], (where, mine.info.fqn)
                offset += theirs["data"].size
            # The unit shard is FSDP2's all-gather input: the padded chunks
            # back to back, padding zero, byte for byte.
            assert unit.chunk_numel == offset, where
            assert _shard_bytes(shard_map, unit) == fsdp_truth.unit_bytes(
                [p["data"] for p in params]), where

    world = truth[0]
    assert _each_case(truth, "fsdp2", start_daemon, check) == (3 if world == 2 else 5)


def test_fsdp1_flat_parameters_are_torchs(truth, start_daemon) -> None:
    def check(client: summon.Client, model: str, rank: int, torch_units: Any) -> None:
        described = client.describe_model(model)
        assert described.layout_kind == "flat"
        shard_map = client.map_shards(model, rank)
        for unit in shard_map.units:
            flat = torch_units[unit.unit]
            where = f"{model} rank {rank} unit '{unit.unit}'"
            assert [p.fqn for p in described.unit(unit.unit).params] == flat["fqns"], where
            assert described.unit(unit.unit).unpadded_numel == sum(
                flat["numels_with_padding"]), where
            # _ShardParamInfo: (in_shard, offset_in_shard, numel_in_shard,
            # intra_param_start_idx, intra_param_end_idx).
            expected = [(fqn, info[1], info[2], info[3])
                        for fqn, info in zip(flat["fqns"], flat["shard_param_infos"]) if info[0]]
            assert [(p.info.fqn, p.offset_in_shard, p.numel, p.element_offset)
                    for p in unit.params] == expected, where
            assert unit.chunk_numel == flat["data"].size, where
            # Every parameter element bit for bit. Padding differs on
            # purpose: torch fills alignment padding with its debugging
            # marker 42.0 (_FLAT_PARAM_PADDING_VALUE), summon keeps zeros;
            # no parameter, gradient or session ever reads either.
            mine = np.frombuffer(_shard_bytes(shard_map, unit), dtype=np.float32)
            theirs = flat["data"]
            real = np.zeros(theirs.size, dtype=bool)
            for _, offset, numel, _ in expected:
                real[offset:offset + numel] = True
            assert mine[real].tobytes() == theirs[real].tobytes(), where
            assert not mine[~real].any(), where
            assert set(np.unique(theirs[~real]).tolist()) <= {0.0, 42.0}, where

    world = truth[0]
    assert _each_case(truth, "fsdp1", start_daemon, check) == (6 if world == 2 else 8)
