"""A full-parameter session as a context manager, with FSDP's names.

    with client.summon_full_params("gpt", scope="layers.1") as s:   # writable
        w = s["layers.1.attn.qkv.weight"]          # numpy array
        s["layers.1.attn.qkv.weight"] = w * 0.5    # into the session
        print(s.stats("layers.1.attn.qkv.weight")[0].l2_norm)
    # normal exit: closed with writeback (read-only sessions just close);
    # an exception inside: aborted, nothing written.

Values: `s[fqn]` returns float32, float64 and float16 tensors as they are
stored and bfloat16 ones widened exactly to float32 (NumPy has no bfloat16;
`s.read(fqn, raw=True)` gives the uint16 bit patterns, `s.torch(fqn)` a real
torch.bfloat16 tensor). `s[fqn] = array` (a NumPy array or a torch tensor)
writes the whole tensor and needs exactly its shape: another shape is a
SummonError INVALID_ARGUMENT naming both, and nothing is written (no reshape,
no broadcast; write a range with `client.write_tensor(..., offset=)`). The
only implicit conversions are these, on the client: floating arrays (and
integer ones, as NumPy's astype does) convert to the stored dtype, bfloat16
rounding to nearest even, and a uint16 array is taken as bfloat16 bit
patterns. While the session is open a background thread renews its lease.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Protocol

import numpy as np

from summon import dtypes, shapes
from summon.errors import SummonError
from summon.messages import CloseResult, Session, TensorInfo, TensorStats
from summon.v1 import types_pb2

if TYPE_CHECKING:
    import torch as torch_types


class SessionClient(Protocol):
    """What a FullParams needs of its client (summon.Client provides it), so
    that this module does not import the client back."""

    def _open(self, model: str, options: types_pb2.SessionOptions) -> Session: ...

    def close_session(self, session_id: str, abort: bool = False,
                      force: bool = False) -> CloseResult: ...

    def renew_session(self, session_id: str,
                      lease_seconds: Optional[int] = None) -> Session: ...

    def read_tensor(self, session_id: str, fqn: str, grad: bool = False,
                    dtype: Optional[str] = None) -> np.ndarray: ...

    def _write_stream(self, session_id: str, fqn: str, array: np.ndarray, grad: bool,
                      dtype: Optional[str], offset: int, *,
                      whole: bool = False) -> int: ...

    def tensor_stats(self, session_id: str, fqns: Iterable[str] = (), grad: bool = False,
                     bins: Optional[int] = None) -> list[TensorStats]: ...


class FullParams:
    """An open session's full tensors by FQN (see the module docstring)."""

    def __init__(self, client: SessionClient, model: str, options: types_pb2.SessionOptions,
                 force: bool = False):
        self._client = client
        self._model = model
        self._options = options
        self._force = force
        self.session: Optional[Session] = None
        self.close_result: Optional[CloseResult] = None
        self.renew_error: Optional[Exception] = None
        self._stop = threading.Event()
        self._renewer: Optional[threading.Thread] = None

    # Lifecycle ---------------------------------------------------------------

    def __enter__(self) -> "FullParams":
        self.session = self._client._open(self._model, self._options)
        lease = self.session.options.lease_seconds or 60
        self._renewer = threading.Thread(target=self._renew_loop, args=(lease / 3.0,),
                                         name=f"summon-renew-{self.id}", daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._stop_renewing()
        if exc_type is not None:
            try:
                self.close_result = self._client.close_session(self.id, abort=True)
            except Exception:  # the original exception matters more
                pass
            return
        try:
            self.close_result = self._client.close_session(self.id, force=self._force)
        except Exception:
            # R7 (ABORTED) leaves the session open: drop it rather than leak
            # it until its lease ends, then report why nothing was written.
            try:
                self._client.close_session(self.id, abort=True)
            except Exception:
                pass
            raise

    def _renew_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self._client.renew_session(self.id)
                self.renew_error = None
            except Exception as error:  # kept for the caller to look at
                self.renew_error = error

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None

    @property
    def id(self) -> str:
        if self.session is None:
            raise RuntimeError("the session is not open (use it in a with statement)")
        return self.session.id

    # Tensors -----------------------------------------------------------------

    def keys(self) -> list[str]:
        """The session's parameter FQNs in model order."""
        return [info.fqn for info in self.params]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, fqn: object) -> bool:
        return fqn in self.keys()

    def __len__(self) -> int:
        return len(self.params)

    @property
    def params(self) -> tuple[TensorInfo, ...]:
        assert self.session is not None
        return self.session.params

    @property
    def grads(self) -> tuple[TensorInfo, ...]:
        assert self.session is not None
        return self.session.grads

    def info(self, fqn: str, grad: bool = False) -> TensorInfo:
        for info in self.grads if grad else self.params:
            if info.fqn == fqn:
                return info
        raise SummonError("NOT_FOUND", f"session {self.id} has no "
                          f"{'gradient' if grad else 'parameter'} '{fqn}'")

    def read(self, fqn: str, grad: bool = False, raw: bool = False,
             dtype: Optional[str] = None) -> np.ndarray:
        """A full tensor as NumPy: bfloat16 widened to float32 unless `raw`."""
        array = self._client.read_tensor(self.id, fqn, grad=grad, dtype=dtype)
        stored = dtype or self._read_dtype() or self.info(fqn, grad).dtype
        if stored == "bfloat16" and not raw:
            return dtypes.bfloat16_to_float32(array)
        return array

    def _read_dtype(self) -> str:
        return dtypes.name_of(self._options.read_dtype)

    def __getitem__(self, fqn: str) -> np.ndarray:
        return self.read(fqn)

    def grad(self, fqn: str) -> np.ndarray:
        return self.read(fqn, grad=True)

    def write(self, fqn: str, value: Any, grad: bool = False) -> int:
        """Writes a whole tensor of exactly its shape, converted to the stored
        dtype (see module docstring); another shape is INVALID_ARGUMENT."""
        info = self.info(fqn, grad)
        array = _as_numpy(value)
        shapes.check_whole_write(fqn, info.shape, array.shape)
        if info.dtype == "bfloat16":
            if array.dtype != np.uint16:
                array = dtypes.float32_to_bfloat16(array.astype(np.float32))
        else:
            array = array.astype(dtypes.wire_numpy(info.dtype), copy=False)
        return self._client._write_stream(self.id, fqn, array, grad, info.dtype, offset=0,
                                          whole=True)

    def __setitem__(self, fqn: str, value: Any) -> None:
        self.write(fqn, value)

    def set_grad(self, fqn: str, value: Any) -> None:
        self.write(fqn, value, grad=True)

    def torch(self, fqn: str, grad: bool = False) -> torch_types.Tensor:
        """A full tensor as torch, in its stored dtype (torch.bfloat16 included)."""
        import torch as torch_module
        array = self.read(fqn, grad=grad, raw=True)
        dtype = self._read_dtype() or self.info(fqn, grad).dtype
        if dtype == "bfloat16":
            return torch_module.from_numpy(array.view(np.int16)).view(torch_module.bfloat16)
        return torch_module.from_numpy(array)

    def stats(self, *fqns: str, grad: bool = False,
              bins: Optional[int] = None) -> list[TensorStats]:
        """Statistics computed where the data is (no fqns: every parameter)."""
        return self._client.tensor_stats(self.id, fqns, grad=grad, bins=bins)

    def renew(self, lease_seconds: Optional[int] = None) -> Session:
        self.session = self._client.renew_session(self.id, lease_seconds)
        return self.session


def _as_numpy(value: Any) -> np.ndarray:
    """NumPy view of an array or a torch tensor (bfloat16 as its uint16 bits)."""
    if type(value).__module__.startswith("torch"):
        import torch
        tensor = value.detach().cpu().contiguous()
        if tensor.dtype == torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(np.uint16)
        return tensor.numpy()
    return np.asarray(value)
