"""A checkpoint shaped like a Hugging Face GPT-2 export, written here: a
sharded index of two files, float32 layer norms beside bfloat16 weights in
one block, an int64 position_ids buffer and a bool attention-mask buffer, and
a tied lm_head stored only under the embedding's name. Loads refuse what they
must (R14, FSDP's one dtype per unit) with the way forward, and the ways
forward (skip, dtype) load every value exactly."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

import summon
from summon import dtypes

D, V, P = 8, 16, 12  # hidden size, vocabulary, positions


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)

    def bf16(*shape: int) -> np.ndarray:  # bfloat16 bits of random values
        return dtypes.float32_to_bfloat16(rng.standard_normal(shape).astype(np.float32))

    tensors: dict[str, np.ndarray] = {
        "transformer.wte.weight": bf16(V, D),
        "transformer.wpe.weight": bf16(P, D),
        "transformer.position_ids": np.arange(P, dtype=np.int64)[None, :],
    }
    for i in range(2):
        h = f"transformer.h.{i}"
        tensors[f"{h}.ln_1.weight"] = rng.standard_normal(D).astype(np.float32)
        tensors[f"{h}.attn.c_attn.weight"] = bf16(D, 3 * D)
        tensors[f"{h}.attn.bias"] = np.tril(np.ones((P, P), dtype=np.bool_))
        tensors[f"{h}.mlp.c_fc.weight"] = bf16(D, 4 * D)
    tensors["transformer.ln_f.weight"] = rng.standard_normal(D).astype(np.float32)
    return tensors


_ST_DTYPE = {np.dtype(np.float32): "F32", np.dtype(np.uint16): "BF16",
             np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": _ST_DTYPE[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


@pytest.fixture
def hf_checkpoint(start_daemon, tmp_path):
    daemon = start_daemon(local_ranks=2)
    root = Path(daemon.data_dir) / "checkpoints" / "gpt2"
    root.mkdir(parents=True)
    tensors = _tensors()
    names = list(tensors)
    halves = {"model-00001-of-00002.safetensors": names[:5],
              "model-00002-of-00002.safetensors": names[5:]}
    weight_map = {}
    for file, part in halves.items():
        _write_safetensors(root / file, {n: tensors[n] for n in part})
        weight_map.update({n: file for n in part})
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}))
    return daemon, tensors


def _as_float32(array: np.ndarray) -> np.ndarray:
    return dtypes.bfloat16_to_float32(array) if array.dtype == np.uint16 else array


def test_buffers_and_mixed_units_are_refused_with_the_way_forward(hf_checkpoint):
    daemon, _ = hf_checkpoint
    client = summon.Client(daemon.address)
    with pytest.raises(summon.SummonError) as r14:
        client.load_model("gpt2", "gpt2", wrap=["transformer.h.*"])
    assert r14.value.code == "INVALID_ARGUMENT"
    assert "'transformer.position_ids' (int64)" in r14.value.message
    assert "'transformer.h.0.attn.bias' (bool)" in r14.value.message
    assert "--skip REGEX" in r14.value.message
    with pytest.raises(summon.SummonError) as mixed:
        client.load_model("gpt2", "gpt2", wrap=["transformer.h.*"],
                          skip=r"position_ids|attn\.bias$")
    assert mixed.value.code == "INVALID_ARGUMENT"
    # The root unit (embeddings, final norm) is the first that mixes.
    assert ("unit '' mixes float32 ('transformer.ln_f.weight') and bfloat16 "
            "('transformer.wte.weight', ...)") in mixed.value.message
    assert "--wrap 'transformer.h.*' --dtype bfloat16" in mixed.value.message
    assert [m.name for m in client.list_models()] == []


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_skip_and_dtype_load_every_value_exactly(hf_checkpoint, dtype):
    daemon, tensors = hf_checkpoint
    client = summon.Client(daemon.address)
    loaded = client.load_model("gpt2", "gpt2", wrap=["transformer.h.*"],
                               skip=r"position_ids|attn\.bias$", dtype=dtype)
    units = {u.fqn: [p.fqn for p in u.params] for u in loaded.model.units}
    assert units["transformer.h.1"] == ["transformer.h.1.ln_1.weight",
                                        "transformer.h.1.attn.c_attn.weight",
                                        "transformer.h.1.mlp.c_fc.weight"]
    assert "transformer.position_ids" not in units[""]
    with client.summon_full_params("gpt2", writeback=False) as s:
        for name, array in tensors.items():
            if array.dtype in (np.int64, np.bool_):
                continue
            want = _as_float32(array)
            if dtype == "bfloat16":  # float32 norms round to nearest even
                want = dtypes.bfloat16_to_float32(dtypes.float32_to_bfloat16(want))
            got = np.asarray(s[name], dtype=np.float32)
            np.testing.assert_array_equal(got, want, err_msg=name)
    # Loading again into the model converts the same way; another dtype than
    # the model's is refused.
    client.load_model("gpt2", "gpt2", dtype=dtype)
    other = "bfloat16" if dtype == "float32" else "float32"
    with pytest.raises(summon.SummonError) as wrong:
        client.load_model("gpt2", "gpt2", dtype=other)
    assert wrong.value.code == "INVALID_ARGUMENT"
