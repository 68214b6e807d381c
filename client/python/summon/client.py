"""summon.Client: every Summon and Trainer RPC with Python types.

    client = summon.Client()                    # $SUMMON_SERVER
    with client.summon_full_params("gpt", scope="layers.1") as s:
        w = s["layers.1.attn.qkv.weight"]       # numpy
        s["layers.1.attn.qkv.weight"] = w * 2   # written back at exit

Every failed call raises `SummonError` with the gRPC status code's name and
the daemon's message.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import grpc
import numpy as np

from summon import checks, dtypes, shapes
from summon.fresh import fresh_array
from summon.errors import SummonError
from summon.inits import InitSpec
from summon.inits import gradient_shards as _gradient_shards
from summon.inits import init_method as _init_method
from summon.messages import (CloseResult, ClusterStatus, DeviceCopyGrant, LoadResult, Model,
                             ModelSummary, SaveResult, Session, ShardChecksum, TensorInfo,
                             TensorStats, Watch, WatchHistory, strategy_value)
from summon.trainer_calls import TrainerCalls, UnitWatch  # noqa: F401 (UnitWatch: re-exported)
from summon.v1 import status_pb2, summon_pb2, summon_pb2_grpc, trainer_pb2_grpc, types_pb2
from summon.weight_sync_calls import WeightSyncCalls

if TYPE_CHECKING:
    from summon.mapping import SessionMapping
    from summon.session import FullParams

DEFAULT_ADDRESS = "127.0.0.1:7070"
# A cluster on etcd between leaders answers UNAVAILABLE with this reason;
# the safe calls are sent again (pausing 50 ms, doubling to 500 ms) until
# their timeout, a minute when the client has none.
_ELECTING = "electing a leader"
_ELECTION_WAIT = 60.0
_ELECTION_PAUSE = 0.05
_ELECTION_PAUSE_MAX = 0.5

# ReadTensor payload per message. The daemon accepts up to 4 MiB; a 4 MiB
# payload plus its framing is over gRPC's default 4 MiB receive limit, so the
# channel raises that limit (below) and reads ask for 4 MiB chunks: fewer
# messages make Python's per-message cost small next to the copy.
READ_CHUNK_BYTES = 4 << 20
WRITE_CHUNK_BYTES = 1 << 20
_MAX_MESSAGE_BYTES = 16 << 20

def session_options(scope: str = "", recurse: bool = True,
                    params: Optional[Iterable[str]] = None, writeback: bool = True,
                    rank0_only: bool = False, home_rank: Optional[int] = None,
                    offload_to_cpu: bool = False, with_grads: bool = False,
                    read_dtype: Optional[str] = None,
                    lease_seconds: Optional[int] = None) -> types_pb2.SessionOptions:
    """SessionOptions from FSDP's keyword names (docs/design.md#session-options)."""
    options = types_pb2.SessionOptions(
        writeback=writeback, rank0_only=rank0_only, offload_to_cpu=offload_to_cpu,
        with_grads=with_grads, read_dtype=dtypes.to_proto(read_dtype))
    if params is not None:
        if scope:
            raise ValueError("give a module scope or a parameter list, not both")
        options.params.fqns.extend(params)
    else:
        options.module.fqn = scope
        options.module.recurse = recurse
    if home_rank is not None:
        options.home_rank = home_rank
    if lease_seconds is not None:
        options.lease_seconds = lease_seconds
    return options


def _read_bytes(path: Optional[str]) -> Optional[bytes]:
    if path is None:
        return None
    with open(path, "rb") as file:
        return file.read()


def _first_line(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.readline().strip()


class Client(TrainerCalls, WeightSyncCalls):
    """A connection to one summond (any node of a cluster).

    address: "HOST:PORT" or "unix:PATH"; default $SUMMON_SERVER, else
    127.0.0.1:7070. timeout: seconds per call (None: no deadline).
    principal: sent as `summon-principal` metadata, which only an
    --insecure-local daemon believes (R12: the owner of the sessions this
    client opens).
    TLS (a daemon with --tls-cert): on when any of tls_ca, tls_cert or token
    is given. tls_ca: PEM file of the CA that signed the daemon's certificate
    (None: the system's roots); tls_cert/tls_key: PEM files of a client
    certificate; token: bearer token (default: the first line of
    $SUMMON_TOKEN_FILE when set).
    """

    def __init__(self, address: Optional[str] = None, timeout: Optional[float] = 60.0,
                 principal: Optional[str] = None, *, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 token: Optional[str] = None):
        self.address = address or os.environ.get("SUMMON_SERVER") or DEFAULT_ADDRESS
        checks.check_address(self.address, "address" if address else "$SUMMON_SERVER")
        self.timeout = timeout
        self.principal = principal
        self._metadata = (("summon-principal", principal),) if principal else None
        # Per session: what must happen in this process before it closes
        # (unmapping its GPU copies: CUDA leaves freeing memory another
        # process still maps undefined).
        self._before_close: dict[str, list[Callable[[], None]]] = {}
        if token is None and os.environ.get("SUMMON_TOKEN_FILE"):
            token = _first_line(os.environ["SUMMON_TOKEN_FILE"])
        options = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            # A restarted daemon is found again within about a second.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        if tls_ca or tls_cert or token:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_bytes(tls_ca),
                private_key=_read_bytes(tls_key),
                certificate_chain=_read_bytes(tls_cert))
            if token:
                credentials = grpc.composite_channel_credentials(
                    credentials, grpc.access_token_call_credentials(token))
            self._channel = grpc.secure_channel(self.address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(self.address, options=options)
        self._summon = summon_pb2_grpc.SummonStub(self._channel)
        self._trainer = trainer_pb2_grpc.TrainerStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"summon.Client({self.address!r})"

    def _call(self, method: Any, request: Any, wait_for_ready: bool = False,
              timeout: Optional[float] = None) -> Any:
        try:
            return method(request, timeout=timeout if timeout is not None else self.timeout,
                          metadata=self._metadata, wait_for_ready=wait_for_ready)
        except grpc.RpcError as error:
            raise SummonError.from_rpc(error) from None

    def _call_through_election(self, method: Any, request: Any) -> Any:
        """A call that is safe to send again (a listing, a description, the
        open of a read-only session), sent again while a cluster on etcd
        answers UNAVAILABLE "electing a leader", until the call's timeout (at
        most a minute without one), like the C++ client: the caller sees the
        new leader's answer instead of the gap. Any other answer, or the
        timeout running out, is raised as it came."""
        budget = self.timeout if self.timeout is not None else _ELECTION_WAIT
        deadline = time.monotonic() + budget
        pause = _ELECTION_PAUSE
        while True:
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                return method(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as error:
                electing = (error.code() == grpc.StatusCode.UNAVAILABLE
                            and _ELECTING in (error.details() or ""))
                if not electing or time.monotonic() + pause >= deadline:
                    raise SummonError.from_rpc(error) from None
            time.sleep(pause)
            pause = min(2 * pause, _ELECTION_PAUSE_MAX)

    # Models ----------------------------------------------------------------

    def list_models(self) -> list[ModelSummary]:
        response = self._call_through_election(self._summon.ListModels,
                                               summon_pb2.ListModelsRequest())
        return [ModelSummary.from_proto(m) for m in response.models]

    def cluster_status(self) -> ClusterStatus:
        """The nodes, leader, epoch and each node's state as the node asked sees them."""
        return ClusterStatus.from_proto(self._call(self._summon.GetClusterStatus,
                                                   status_pb2.GetClusterStatusRequest()))

    def describe_model(self, name: str) -> Model:
        return Model.from_proto(self._call_through_election(
            self._summon.DescribeModel, summon_pb2.DescribeModelRequest(model=name)))

    def create_model(self, name: str, layout: Union[dict, str],
                     strategy: Optional[str] = None, init: InitSpec = None,
                     grad_ranks: Union[None, str, Sequence[int]] = None,
                     grad_init: InitSpec = None) -> Model:
        """Creates a model from a layout (a dict or JSON text, docs/design.md#the-layout-file).

        init: None or "zeros", "seeded:SEED" (or an int), or "external" (the
        attached trainer fills the shards and calls mark_initialized).
        grad_ranks: None (no gradients), "all", or a list of global ranks.
        """
        checks.check_model_name(name)
        request = summon_pb2.CreateModelRequest(
            name=name, layout_json=layout if isinstance(layout, str) else json.dumps(layout))
        if strategy is not None:
            request.strategy = strategy_value(strategy)
        method = _init_method(init)
        if method is not None:
            request.init.CopyFrom(method)
        grads = _gradient_shards(grad_ranks, grad_init)
        if grads is not None:
            request.grads.CopyFrom(grads)
        return Model.from_proto(self._call(self._summon.CreateModel, request))

    def load_model(self, name: str, path: str, wrap: Optional[Sequence[str]] = None,
                   strategy: Optional[str] = None, use_orig_params: Optional[bool] = None,
                   grad_ranks: Union[None, str, Sequence[int]] = None,
                   grad_init: InitSpec = None, skip: str = "",
                   dtype: Optional[str] = None) -> LoadResult:
        """Loads safetensors at `path` (on the daemon's filesystem) into `name`.

        With `wrap` (unit prefix patterns such as "layers.*"), `strategy`,
        `use_orig_params` or `skip` the model is created from the checkpoint.
        `skip` (a regular expression) leaves matching tensors out of a new
        model; `dtype` ("float32", "bfloat16", ...) converts every tensor to it.
        """
        checks.check_model_name(name)
        request = summon_pb2.LoadModelRequest(model=name, path=path, skip=skip)
        if dtype is not None:
            request.dtype = dtypes.to_proto(dtype)
        if (wrap is not None or strategy is not None or use_orig_params is not None
                or skip):
            request.create.unit_prefixes.extend(wrap or [])
            if strategy is not None:
                request.create.strategy = strategy_value(strategy)
            if use_orig_params is not None:
                request.create.use_orig_params = use_orig_params
        grads = _gradient_shards(grad_ranks, grad_init)
        if grads is not None:
            request.grads.CopyFrom(grads)
        response = self._call(self._summon.LoadModel, request)
        return LoadResult(Model.from_proto(response.model), response.bytes_read)

    def save_model(self, name: str, path: str, max_file_bytes: int = 0,
                   overwrite: bool = False) -> SaveResult:
        request = summon_pb2.SaveModelRequest(model=name, path=path,
                                              max_file_bytes=max_file_bytes)
        if overwrite:
            # Set only when asked, so daemons built before the field still answer.
            request.overwrite = True
        response = self._call(self._summon.SaveModel, request)
        return SaveResult(tuple(response.files), response.bytes_written)

    def model_checksum(self, name: str) -> list[ShardChecksum]:
        response = self._call(self._summon.ModelChecksum,
                              summon_pb2.ModelChecksumRequest(model=name))
        return [ShardChecksum.from_proto(s) for s in response.shards]

    def delete_model(self, name: str, force: bool = False) -> None:
        self._call(self._summon.DeleteModel,
                   summon_pb2.DeleteModelRequest(model=name, force=force))

    # Sessions --------------------------------------------------------------

    def open_session(self, model: str, scope: str = "", recurse: bool = True,
                     params: Optional[Iterable[str]] = None, writeback: bool = True,
                     rank0_only: bool = False, home_rank: Optional[int] = None,
                     offload_to_cpu: bool = False, with_grads: bool = False,
                     read_dtype: Optional[str] = None,
                     lease_seconds: Optional[int] = None) -> Session:
        """Gathers the scoped parameters into a new session (FSDP's option names)."""
        return self._open(model, session_options(
            scope, recurse, params, writeback, rank0_only, home_rank, offload_to_cpu,
            with_grads, read_dtype, lease_seconds))

    def _open(self, model: str, options: types_pb2.SessionOptions) -> Session:
        request = summon_pb2.OpenSessionRequest(model=model, options=options)
        # A read-only session changes nothing: its open is safe to repeat.
        read_only = options.HasField("writeback") and not options.writeback
        call = self._call_through_election if read_only else self._call
        return Session.from_proto(call(self._summon.OpenSession, request))

    def get_session(self, session_id: str) -> Session:
        return Session.from_proto(self._call_through_election(
            self._summon.GetSession, summon_pb2.GetSessionRequest(session_id=session_id)))

    def list_sessions(self, model: str = "", all: bool = False) -> list[Session]:
        """The sessions the caller may operate; with all, every open session
        and who holds it (operators: the admin role)."""
        response = self._call_through_election(
            self._summon.ListSessions, status_pb2.ListSessionsRequest(model=model, all=all))
        return [Session.from_proto(s) for s in response.sessions]

    def renew_session(self, session_id: str,
                      lease_seconds: Optional[int] = None) -> Session:
        request = summon_pb2.RenewSessionRequest(session_id=session_id)
        if lease_seconds is not None:
            request.lease_seconds = lease_seconds
        return Session.from_proto(self._call(self._summon.RenewSession, request))

    def close_session(self, session_id: str, abort: bool = False,
                      force: bool = False) -> CloseResult:
        """Ends a session: writeback unless read-only or `abort` (R7: `force`).

        Copies of it this client opened on a GPU (DeviceSessionCopy) are
        closed first.
        """
        for unmap in self._before_close.pop(session_id, []):
            unmap()
        return CloseResult.from_proto(self._call(
            self._summon.CloseSession,
            summon_pb2.CloseSessionRequest(session_id=session_id, abort=abort,
                                           force=force)))

    def summon_full_params(self, model: str, scope: str = "", recurse: bool = True,
                           writeback: bool = True, rank0_only: bool = False,
                           offload_to_cpu: bool = False, with_grads: bool = False,
                           params: Optional[Iterable[str]] = None,
                           read_dtype: Optional[str] = None,
                           lease_seconds: int = 60, home_rank: Optional[int] = None,
                           force: bool = False) -> "FullParams":
        """A session as a context manager, with FSDP's names (see summon.session)."""
        from summon.session import FullParams
        return FullParams(self, model, session_options(
            scope, recurse, params, writeback, rank0_only, home_rank, offload_to_cpu,
            with_grads, read_dtype, lease_seconds), force=force)

    # Tensors ---------------------------------------------------------------

    def get_tensor(self, model: str, fqn: str, grad: bool = False,
                   dtype: Optional[str] = None) -> np.ndarray:
        """One-shot read: a read-only session of exactly `fqn`, read, then closed
        (on an error or KeyboardInterrupt too), so a script leaves no session."""
        session = self.open_session(model, params=[fqn], writeback=False,
                                    with_grads=grad, lease_seconds=30)
        try:
            return self.read_tensor(session.id, fqn, grad=grad, dtype=dtype)
        finally:
            self.close_session(session.id, abort=True)

    def read_tensor(self, session_id: str, fqn: str, grad: bool = False,
                    dtype: Optional[str] = None, offset: int = 0,
                    count: Optional[int] = None, out: Optional[np.ndarray] = None,
                    chunk_bytes: int = READ_CHUNK_BYTES) -> np.ndarray:
        """Reads a session tensor (or `count` elements from `offset`) as raw wire data.

        The chunks of the stream are copied straight into one buffer: `out`
        when given (a C-contiguous array of the wire dtype and size), else a
        new one (huge pages asked for: summon.fresh). The result has the tensor's shape for a whole-tensor read,
        else is flat. bfloat16 arrives as uint16 bit patterns (NumPy has no
        bfloat16): see dtypes.bfloat16_to_float32, or FullParams.
        """
        request = summon_pb2.ReadTensorRequest(
            session_id=session_id, fqn=fqn, grad=grad, dtype=dtypes.to_proto(dtype),
            element_offset=offset, chunk_bytes=chunk_bytes)
        if count is not None:
            request.element_count = count
        call = self._summon.ReadTensor(request, timeout=self.timeout,
                                       metadata=self._metadata)
        try:
            first = next(call)
            info = TensorInfo.from_proto(first.info)
            wire = dtypes.wire_numpy(info.dtype)
            total = count if count is not None else info.numel - offset
            if out is None:
                out = fresh_array(total, wire)
            elif (out.dtype != wire or out.size != total
                  or not out.flags["C_CONTIGUOUS"] or not out.flags["WRITEABLE"]):
                raise ValueError(f"out must be a writable C-contiguous {wire} array of "
                                 f"{total} elements, got {out.dtype} {out.shape}")
            raw = memoryview(out.reshape(-1).view(np.uint8))
            itemsize = wire.itemsize
            received = 0
            message = first
            while True:
                start = (message.element_offset - offset) * itemsize
                end = start + len(message.data)
                if start < 0 or end > len(raw):
                    raise SummonError("INTERNAL", f"chunk at element "
                                      f"{message.element_offset} lies outside the read")
                raw[start:end] = message.data
                received += len(message.data)
                message = next(call, None)
                if message is None:
                    break
        except grpc.RpcError as error:
            raise SummonError.from_rpc(error) from None
        except StopIteration:
            raise SummonError("INTERNAL", f"empty ReadTensor stream for '{fqn}'") from None
        if received != len(raw):
            raise SummonError("DATA_LOSS", f"read {received} of {len(raw)} bytes of '{fqn}'")
        if count is None and offset == 0:
            return out.reshape(info.shape)
        return out

    def map_session(self, session_id: str, grad: bool = False) -> "SessionMapping":
        """Maps a read-only session's copy (or its gradients) read-only into this process.

        Only on the daemon's host (connect over loopback or its Unix socket);
        the values are the stored dtype's, without read_dtype conversion.
        FAILED_PRECONDITION for a writable session or one with its own edits.
        """
        from summon.mapping import SessionMapping
        grant = self._call(self._summon.MapSession,
                           summon_pb2.MapSessionRequest(session_id=session_id, grad=grad,
                                                          host_copy_only=True))
        return SessionMapping(grant)

    def grant_device_copies(self, session_id: str, grad: bool = False) -> DeviceCopyGrant:
        """A session's copies in GPU memory as CUDA IPC handles (MapSession).

        On a node whose shards are in GPU memory (summond --device cuda) a
        session's copy is on every GPU of the node's ranks; the grant lists
        each (`device_copies`: device, ranks, ipc_handle) with `copy_bytes`
        and every tensor's place (`tensors`: info, byte_offset). Only on the daemon's host; for
        writable sessions too. summon.torch.DeviceSessionCopy opens one.
        FAILED_PRECONDITION (as SummonError) for a copy in host memory: map
        that with map_session.
        """
        grant = self._call(self._summon.MapSession,
                           summon_pb2.MapSessionRequest(session_id=session_id, grad=grad))
        if not grant.device_copies:
            raise SummonError("FAILED_PRECONDITION",
                              f"session {session_id}'s copy is in host memory: map it "
                              "with map_session")
        return DeviceCopyGrant.from_proto(grant)

    def before_close(self, session_id: str, callback: Callable[[], None]) -> None:
        """Runs `callback` when this client closes `session_id` (before the call)."""
        self._before_close.setdefault(session_id, []).append(callback)

    def write_tensor(self, session_id: str, fqn: str, data: np.ndarray, grad: bool = False,
                     dtype: Optional[str] = None, offset: Optional[int] = None,
                     count: Optional[int] = None,
                     chunk_bytes: int = WRITE_CHUNK_BYTES) -> int:
        """Writes raw wire data into a session tensor; returns elements written.

        Without `offset` the write is of the whole tensor, and `data` must
        have exactly its shape (summon.shapes: no reshape, no broadcast, no
        short write; INVALID_ARGUMENT naming both shapes, nothing sent).
        With `offset` it writes the range of `data.size` elements (`count`,
        when given, must say the same) from that element of the flattened
        tensor, which must lie within the tensor (OUT_OF_RANGE).
        `dtype` is the tensor's stored dtype (writes never convert, R5);
        default: float32/float64/float16 from the array, and bfloat16 for a
        uint16 array of bit patterns. The array is streamed in chunks of its
        own memory; the write lands only when the whole stream arrived.
        """
        array = np.ascontiguousarray(data)
        whole = offset is None
        if offset is None:
            if count is not None:
                raise SummonError("INVALID_ARGUMENT", "count= names a range: give offset= too")
            info = self._find_tensor(session_id, fqn, grad)
            if info is not None:
                shapes.check_whole_write(fqn, info.shape, array.shape)
            offset = 0
        elif count is not None and count != array.size:
            raise SummonError("INVALID_ARGUMENT", f"count={count} but the data has "
                              f"{array.size} elements")
        return self._write_stream(session_id, fqn, array, grad, dtype, offset, chunk_bytes,
                                  whole=whole)

    def _find_tensor(self, session_id: str, fqn: str, grad: bool) -> Optional[TensorInfo]:
        """The session's description of `fqn` (a tied alias through its primary);
        None when the session lists neither: the daemon then answers NOT_FOUND."""
        session = self.get_session(session_id)
        listed = {info.fqn: info for info in (session.grads if grad else session.params)}
        if fqn in listed:
            return listed[fqn]
        for unit in self.describe_model(session.model).units:
            for param in unit.params:
                if fqn in param.aliases:
                    return listed.get(param.fqn)
        return None

    def _write_stream(self, session_id: str, fqn: str, array: np.ndarray, grad: bool,
                      dtype: Optional[str], offset: int,
                      chunk_bytes: int = WRITE_CHUNK_BYTES, whole: bool = False) -> int:
        """WriteTensor of `array` from element `offset`. `whole`: a whole-tensor
        write, which the daemon refuses unless `array` has the tensor's exact
        shape (R5)."""
        if dtype is None:
            dtype = {"<f4": "float32", "<f8": "float64", "<f2": "float16",
                     "<u2": "bfloat16"}.get(array.dtype.newbyteorder("<").str)
            if dtype is None:
                raise ValueError(f"cannot write a {array.dtype} array; summon stores "
                                 "float32, float64, float16 and bfloat16 (uint16 bits)")
        wire = dtypes.wire_numpy(dtype)
        if array.dtype != wire:
            raise ValueError(f"{dtype} data must be a {wire} array, got {array.dtype} "
                             "(writes never convert)")
        raw = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        header = summon_pb2.WriteTensorHeader(
            session_id=session_id, fqn=fqn, grad=grad, dtype=dtypes.to_proto(dtype),
            element_offset=offset, element_count=array.size)
        if whole:
            header.whole_tensor = True
            header.shape.extend(int(extent) for extent in array.shape)
        step = max(wire.itemsize, chunk_bytes - chunk_bytes % wire.itemsize)

        def messages() -> Iterator[summon_pb2.WriteTensorRequest]:
            yield summon_pb2.WriteTensorRequest(header=header)
            for start in range(0, len(raw), step):
                yield summon_pb2.WriteTensorRequest(data=bytes(raw[start:start + step]))

        response = self._call(self._summon.WriteTensor, messages())
        return response.elements_written

    def tensor_stats(self, session_id: str, fqns: Iterable[str] = (), grad: bool = False,
                     bins: Optional[int] = None) -> list[TensorStats]:
        """min, max, mean, L2 norm, NaN/Inf counts and a histogram, computed where the
        data is (empty fqns: every parameter of the session)."""
        request = summon_pb2.TensorStatsRequest(session_id=session_id, fqns=list(fqns),
                                                grad=grad)
        if bins is not None:
            request.histogram_bins = bins
        response = self._call(self._summon.TensorStats, request)
        return [TensorStats.from_proto(t) for t in response.tensors]

    # Watches (docs/api.md#watches) -----------------------------------------

    def add_watch(self, model: str, params: Iterable[str] = (), every: int = 1,
                  histogram_bins: int = 32, grads: bool = False) -> Watch:
        """Records statistics of the parameters matching `params` (globs; all
        when empty) every `every`-th optimizer step, where the shards are."""
        request = summon_pb2.AddWatchRequest(model=model, params=list(params), every=every,
                                             histogram_bins=histogram_bins, grads=grads)
        return Watch.from_proto(self._call(self._summon.AddWatch, request))

    def list_watches(self) -> list[Watch]:
        response = self._call(self._summon.ListWatches, summon_pb2.ListWatchesRequest())
        return [Watch.from_proto(w) for w in response.watches]

    def remove_watch(self, model: str) -> None:
        self._call(self._summon.RemoveWatch, summon_pb2.RemoveWatchRequest(model=model))

    def show_watch(self, model: str, param: str, since: int = 0,
                   grad: bool = False) -> WatchHistory:
        """A watched parameter's records, oldest first (steps >= since)."""
        request = summon_pb2.ShowWatchRequest(model=model, param=param, since=since, grad=grad)
        return WatchHistory.from_proto(self._call(self._summon.ShowWatch, request))
