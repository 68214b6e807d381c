"""summon models in and out of torch's Distributed Checkpoint (DCP) format.

    summon.torch.save_dcp(client, "gpt", "/ckpt/step-100")   # summon -> DCP
    summon.torch.load_dcp(client, "gpt", "/ckpt/step-100")   # DCP -> summon

Both run in one process (no process group; DCP's `no_dist`) beside the
training job. save_dcp writes each full parameter under its FQN (a tied one
under every name FSDP's state_dict gives it), so
`torch.distributed.checkpoint.load(model.state_dict(), ...)` restores an
FSDP2 model of the same architecture at any world size: DCP reshards.
load_dcp reads the full tensors of a DCP checkpoint, whatever world size
wrote it, and writes them into summond through a writable session (the
model must exist with the same names and shapes; opening the session waits
for the job's ranks to be IDLE, like any edit). DCP needs torch, so summonctl
has no DCP format: `python -m summon.dcp save|load MODEL DIR` is the command.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence, Union

import numpy as np
import torch
import torch.distributed.checkpoint as dcp

from summon.client import Client

PathLike = Union[str, os.PathLike]


def _names(client: Client, model: str) -> dict[str, list[str]]:
    """Each stored parameter's FQN -> every name it has (itself first)."""
    params = client.describe_model(model).params
    return {fqn: [fqn, *info.aliases] for fqn, info in params.items()}


def save_dcp(client: Client, model: str, directory: PathLike) -> int:
    """Writes model `model`'s full parameters as a DCP checkpoint in `directory`;
    returns how many names it wrote."""
    names = _names(client, model)
    state: dict[str, torch.Tensor] = {}
    with client.summon_full_params(model, writeback=False) as session:
        for fqn, aliases in names.items():
            tensor = session.torch(fqn).clone()
            for name in aliases:
                state[name] = tensor
    dcp.save(state, checkpoint_id=os.fspath(directory), no_dist=True)
    return len(state)


def _as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's values in the wire form session.write takes (bfloat16 as bits)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().view(np.uint16)
    return tensor.contiguous().numpy()


def load_dcp(client: Client, model: str, directory: PathLike) -> int:
    """Writes the DCP checkpoint in `directory` into model `model` (every stored
    parameter, read under its FQN; a checkpoint without one of them is refused
    before anything is written); returns how many it wrote."""
    names = _names(client, model)
    described = client.describe_model(model).params
    metadata = dcp.FileSystemReader(os.fspath(directory)).read_metadata()
    missing = sorted(set(names) - set(metadata.state_dict_metadata))
    if missing:
        raise ValueError(f"the DCP checkpoint in {os.fspath(directory)} has no "
                         f"{missing[:3]} of model '{model}' ({len(missing)} missing)")
    state = {}
    for fqn in names:
        entry = metadata.state_dict_metadata[fqn]
        info = described[fqn]
        if tuple(entry.size) != tuple(info.shape):
            raise ValueError(f"'{fqn}' has shape {tuple(entry.size)} in the checkpoint, "
                             f"{tuple(info.shape)} in model '{model}'")
        state[fqn] = torch.empty(tuple(entry.size), dtype=entry.properties.dtype)
    dcp.load(state, checkpoint_id=os.fspath(directory), no_dist=True)
    with client.summon_full_params(model, writeback=True) as session:
        for fqn, tensor in state.items():
            session.write(fqn, _as_numpy(tensor))
    return len(state)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m summon.dcp",
        description="A summon model to or from a torch Distributed Checkpoint directory.")
    parser.add_argument("verb", choices=("save", "load"),
                        help="save: summon -> DCP; load: DCP -> summon")
    parser.add_argument("model", help="the summon model")
    parser.add_argument("directory", help="the DCP checkpoint directory")
    parser.add_argument("--server", default=None, help="summond (default $SUMMON_SERVER)")
    args = parser.parse_args(argv)
    client = Client(args.server) if args.server else Client()
    try:
        if args.verb == "save":
            count = save_dcp(client, args.model, args.directory)
            print(f"saved {count} tensors of model '{args.model}' to {args.directory}")
        else:
            count = load_dcp(client, args.model, args.directory)
            print(f"loaded {count} tensors into model '{args.model}' from {args.directory}")
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
