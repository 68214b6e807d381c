"""summon's Python client: full-parameter sessions of sharded models from Python.

    import summon
    client = summon.Client()                        # $SUMMON_SERVER
    with client.summon_full_params("gpt", scope="layers.1") as s:
        print(s.stats()[0].l2_norm)

`summon.torch` is the trainer side (layouts from nn.Modules, shard views in
shared memory, phase reporting). The gRPC stubs are generated from proto/ on
first import (see summon._stubs).
"""

from summon._stubs import ensure_stubs as _ensure_stubs


def _version() -> str:
    """summon's one version number (summond --version's): the checkout's
    VERSION file, else the installed distribution's."""
    from pathlib import Path
    checkout = Path(__file__).resolve().parents[2] / "VERSION"
    if checkout.is_file():
        return checkout.read_text().strip()
    from importlib import metadata
    return metadata.version("summon")


__version__ = _version()

_ensure_stubs()

from summon.client import Client, UnitWatch  # noqa: E402
from summon.errors import SummonError  # noqa: E402
from summon.messages import (Attachment, CloseResult, ClusterNode,  # noqa: E402
                             DeviceCopy, DeviceCopyGrant, MappedTensor,
                             ClusterStatus, Model, ModelSummary,
                             Parameter, PhaseReport, Session, SessionOptions,
                             ShardChecksum, ShardMap, TensorInfo, TensorStats, Unit,
                             UnitGeneration, UnitShard, Watch, WatchHistory,
                             WatchRecord)
from summon.session import FullParams  # noqa: E402
from summon.slice_buffer import SliceBuffer  # noqa: E402
from summon.messages import ReadSlicesStats  # noqa: E402
from summon.weight_sync_calls import SliceRequest  # noqa: E402

__all__ = [
    "Attachment", "Client", "CloseResult", "ClusterNode", "ClusterStatus", "DeviceCopy",
    "DeviceCopyGrant", "FullParams", "MappedTensor", "Model", "ModelSummary",
    "Parameter", "PhaseReport", "ReadSlicesStats", "Session", "SessionOptions", "ShardChecksum",
    "ShardMap", "SliceBuffer", "SliceRequest", "SummonError", "TensorInfo", "TensorStats", "Unit",
    "UnitGeneration", "UnitShard", "UnitWatch", "Watch", "WatchHistory", "WatchRecord",
]
