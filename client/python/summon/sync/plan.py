"""Sync plans: which boxes of the trainer's tensors make each engine parameter.

A plan is data (a JSON file and the same Python object): for every
tensor-parallel (TP) rank of the engine, a list of entries; an entry names one
engine parameter and says how to build it from the trainer's tensors (named
by their fully-qualified names, FQNs):

    engine parameter = cat(piece_0, piece_1, ..., dim=cat_dim)
                       followed by `pad_rows` rows of zeros along dim 0,
                       in `dtype`

where each piece is a box of one trainer tensor: (start, length) per
dimension. That covers vLLM's tensor-parallel layouts: a column-parallel
weight's row block, a row-parallel weight's column block (a strided box), the
fused qkv_proj and gate_up_proj (several pieces), stacked MoE experts (3-D
boxes) and the zero rows of a padded vocabulary. summon.sync.rules generates
plans from a Hugging Face config; a user writes one by hand the same way.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Iterator, Mapping, Sequence

FORMAT = "summon.sync.plan/1"

Box = tuple[tuple[int, int], ...]


def _box(value: Sequence[Sequence[int]]) -> Box:
    box = tuple((int(start), int(length)) for start, length in value)
    for start, length in box:
        if start < 0 or length < 0:
            raise ValueError(f"box {list(box)}: starts and lengths must be >= 0")
    return box


@dataclasses.dataclass(frozen=True)
class Piece:
    """One box of one trainer tensor: `box[d] = (start, length)` per dimension."""

    fqn: str
    box: Box

    def __post_init__(self) -> None:
        object.__setattr__(self, "box", _box(self.box))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(length for _, length in self.box)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One engine parameter on one TP rank: its pieces concatenated along
    `cat_dim`, then `pad_rows` zero rows (dim 0), as `dtype` ("float32",
    "bfloat16", "float16", "float64"); `shape` is the result's shape."""

    engine_name: str
    pieces: tuple[Piece, ...]
    shape: tuple[int, ...]
    dtype: str
    cat_dim: int = 0
    pad_rows: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "pieces", tuple(self.pieces))
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        self._check_shape()

    def _check_shape(self) -> None:
        """The pieces, concatenated and padded, must make exactly `shape`."""
        name = self.engine_name
        rank = len(self.shape)
        if not 0 <= self.cat_dim < max(rank, 1):
            raise ValueError(f"{name}: cat_dim {self.cat_dim} outside a {rank}-d shape")
        if self.pad_rows < 0:
            raise ValueError(f"{name}: pad_rows {self.pad_rows} < 0")
        along = 0
        for piece in self.pieces:
            if len(piece.box) != rank:
                raise ValueError(f"{name}: piece {piece.fqn} has a {len(piece.box)}-d box "
                                 f"for a {rank}-d parameter")
            for dim, (length, want) in enumerate(zip(piece.shape, self.shape)):
                if dim != self.cat_dim and length != want:
                    raise ValueError(f"{name}: piece {piece.fqn} box {list(piece.box)} is "
                                     f"{length} long in dim {dim}, the parameter {want}")
            along += piece.shape[self.cat_dim] if rank else 1
        if rank == 0:
            if len(self.pieces) != 1 or self.pad_rows:
                raise ValueError(f"{name}: a scalar is exactly one piece, no padding")
            return
        if self.pad_rows and self.cat_dim != 0:
            # Rows padded after a cat along another dim would need every piece
            # padded: no vLLM layout does that, so a plan saying it is a typo.
            raise ValueError(f"{name}: pad_rows needs cat_dim 0")
        if along + self.pad_rows != self.shape[self.cat_dim]:
            raise ValueError(f"{name}: pieces give {along} + {self.pad_rows} padding "
                             f"along dim {self.cat_dim}, the parameter has "
                             f"{self.shape[self.cat_dim]}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class SyncPlan:
    """Entries per TP rank (`ranks[r]`), with the trainer tensors' shapes
    (`sources`: fqn -> shape) the boxes were cut for."""

    tp_size: int
    ranks: tuple[tuple[Entry, ...], ...]
    sources: Mapping[str, tuple[int, ...]]
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", tuple(tuple(r) for r in self.ranks))
        object.__setattr__(self, "sources",
                           {k: tuple(int(n) for n in v) for k, v in self.sources.items()})
        if self.tp_size < 1 or len(self.ranks) != self.tp_size:
            raise ValueError(f"plan: {len(self.ranks)} rank lists for tp_size {self.tp_size}")
        self.validate()

    def entries(self, tp_rank: int) -> tuple[Entry, ...]:
        """The entries of TP rank `tp_rank`."""
        if not 0 <= tp_rank < self.tp_size:
            raise ValueError(f"tp_rank {tp_rank} outside tp_size {self.tp_size}")
        return self.ranks[tp_rank]

    def validate(self) -> None:
        """Every box inside its source tensor; engine names unique per rank."""
        for rank, entries in enumerate(self.ranks):
            seen: set[str] = set()
            for entry in entries:
                if entry.engine_name in seen:
                    raise ValueError(f"rank {rank}: {entry.engine_name} appears twice")
                seen.add(entry.engine_name)
                for piece in entry.pieces:
                    check_box(piece.fqn, piece.box, self.sources.get(piece.fqn),
                              f"rank {rank} {entry.engine_name}")

    def slice_bytes(self, tp_rank: int, itemsize: Callable[[str], int]) -> int:
        """Bytes of the boxes rank `tp_rank` reads (padding is not read)."""
        return sum(piece.numel * itemsize(entry.dtype)
                   for entry in self.entries(tp_rank) for piece in entry.pieces)

    # -- JSON ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "description": self.description,
            "tp_size": self.tp_size,
            "sources": {fqn: list(shape) for fqn, shape in self.sources.items()},
            "ranks": [[_entry_to_dict(e) for e in entries] for entries in self.ranks],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SyncPlan":
        if data.get("format") != FORMAT:
            raise ValueError(f"not a sync plan: format {data.get('format')!r}, "
                             f"expected {FORMAT!r}")
        ranks = []
        for entries in data["ranks"]:
            ranks.append(tuple(
                Entry(engine_name=e["engine_name"],
                      pieces=tuple(Piece(p["fqn"], _box(p["box"])) for p in e["pieces"]),
                      shape=tuple(e["shape"]), dtype=e["dtype"],
                      cat_dim=int(e.get("cat_dim", 0)), pad_rows=int(e.get("pad_rows", 0)))
                for e in entries))
        return cls(tp_size=int(data["tp_size"]), ranks=tuple(ranks),
                   sources={k: tuple(v) for k, v in data["sources"].items()},
                   description=data.get("description", ""))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "SyncPlan":
        return cls.from_dict(json.loads(text))

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())

    @classmethod
    def load(cls, path: str) -> "SyncPlan":
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read())

    def __iter__(self) -> Iterator[tuple[Entry, ...]]:
        return iter(self.ranks)


def check_box(fqn: str, box: Box, shape: Sequence[int] | None, where: str) -> None:
    """Raises ValueError naming `where` and `fqn` if `box` is not inside `shape`."""
    if shape is None:
        raise ValueError(f"{where}: source {fqn} is not among the plan's sources")
    if len(box) != len(shape):
        raise ValueError(f"{where}: box {list(box)} of {fqn} has {len(box)} dims, "
                         f"the tensor {len(shape)} ({list(shape)})")
    for dim, ((start, length), size) in enumerate(zip(box, shape)):
        if start + length > size:
            raise ValueError(f"{where}: box {list(box)} of {fqn} ends at {start + length} "
                             f"in dim {dim}, past its size {size}")


def _entry_to_dict(entry: Entry) -> dict[str, Any]:
    return {
        "engine_name": entry.engine_name,
        "shape": list(entry.shape),
        "dtype": entry.dtype,
        "cat_dim": entry.cat_dim,
        "pad_rows": entry.pad_rows,
        "pieces": [{"fqn": p.fqn, "box": [list(b) for b in p.box]} for p in entry.pieces],
    }
