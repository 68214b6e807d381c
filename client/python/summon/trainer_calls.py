"""summon.Client's Trainer RPCs (the calls a training process makes), as a
mixin of Client: attach, renew, report_phase, map_shards, mark_initialized,
watch_units. Client supplies `_call`, `_trainer` (the Trainer stub),
`_metadata` and `timeout`."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterator, Optional, Sequence

import grpc

from summon.errors import SummonError
from summon.messages import (Attachment, PhaseReport, Renewal, ShardMap, UnitGeneration,
                             phase_value)
from summon.phases import unreachable
from summon.v1 import trainer_pb2

# The part of a call's timeout summond may spend waiting for a writable
# session (R3) before it answers; the rest is the answer's way back (through
# the leader, in a cluster).
_R3_SLICE_OF_TIMEOUT = 0.5


class UnitWatch:
    """A WatchUnits stream: iterate for each list of unit counters; `cancel()` ends it."""

    def __init__(self, call: Any):
        self._call = call

    def __iter__(self) -> Iterator[list[UnitGeneration]]:
        try:
            for message in self._call:
                yield [UnitGeneration.from_proto(u) for u in message.units]
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED or self._call.is_active():
                raise SummonError.from_rpc(error) from None

    def cancel(self) -> None:
        self._call.cancel()


class TrainerCalls:
    """The Trainer service's calls (see the module)."""

    _trainer: Any
    _metadata: Any
    timeout: Optional[float]

    def _call(self, method: Any, request: Any, wait_for_ready: bool = False,
              timeout: Optional[float] = None) -> Any:
        raise NotImplementedError  # Client's

    # Trainer calls wait for the daemon to be reachable (a restart between two
    # steps) up to the call's timeout instead of failing at once.

    def attach(self, model: str, ranks: Sequence[int], incarnation: str,
               lease_seconds: Optional[int] = None,
               timeout: Optional[float] = None) -> Attachment:
        request = trainer_pb2.AttachRequest(model=model, ranks=list(ranks),
                                            incarnation=incarnation)
        if lease_seconds is not None:
            request.lease_seconds = lease_seconds
        return Attachment.from_proto(self._call(self._trainer.Attach, request, True,
                                                timeout))

    def heartbeat(self, lease_id: str, timeout: Optional[float] = None) -> list[UnitGeneration]:
        return list(self.renew(lease_id, timeout).units)

    def renew(self, lease_id: str, timeout: Optional[float] = None,
              phases_unknown: bool = False, phases_reestablished: bool = False) -> Renewal:
        """A heartbeat that also says whether the daemon lost track of the
        lease's ranks' phases (then report them again: sessions on the model
        are refused until then). phases_unknown: tell the daemon this trainer
        moved its ranks unheard; phases_reestablished: it reported them all
        again (ReportPhase with reestablishing)."""
        request = trainer_pb2.TrainerHeartbeatRequest(
            lease_id=lease_id, phases_unknown=phases_unknown,
            phases_reestablished=phases_reestablished)
        return Renewal.from_proto(self._call(self._trainer.Heartbeat, request, True, timeout))

    def detach(self, lease_id: str) -> None:
        self._call(self._trainer.Detach, trainer_pb2.DetachRequest(lease_id=lease_id), True)

    def report_phase(self, model: str, rank: int, phase: str, step: Optional[int] = None,
                     deadline_ms: Optional[int] = None, lease_id: str = "",
                     timeout: Optional[float] = None,
                     reestablishing: bool = False,
                     through: Optional[str] = None,
                     publish_step: Optional[int] = None) -> PhaseReport:
        """Moves a rank along IDLE -> FORWARD -> BETWEEN -> BACKWARD -> OPTIMIZER -> IDLE.

        A move refused by a writable session (R3) fails with
        FAILED_PRECONDITION at once, or waits up to `deadline_ms` and then
        fails with DEADLINE_EXCEEDED. timeout: how long one call may go
        unanswered (default: the client's). It never includes the R3 wait:
        the wait is asked for in slices of at most half of `timeout`, each
        its own call, so a summond (or leader) that stops answering is noticed
        within `timeout` however long the wait, and a wait goes on for as
        long as summond answers (R24, docs/operations.md). `waited_ms` of the
        result counts every slice.
        reestablishing: see ReportPhaseRequest.reestablishing.
        through: two moves in one call, to `through` and then to `phase`
        (ReportPhaseRequest.through); a refused second move leaves the rank
        in `through`. `through` must be a move R3 never blocks (into
        BETWEEN or IDLE): a slice of the R3 wait that runs out has made it,
        and the next slice asks for `phase` alone.
        publish_step: with the move OPTIMIZER -> IDLE that ends step N, asks
        summond to publish version N once every rank of the model ended that
        step asking for it (ReportPhaseRequest.publish_step); the report of
        the rank that ended it last carries `published` (or
        `publish_error`, the move made all the same).
        """
        if through is not None and through.upper() not in ("BETWEEN", "IDLE"):
            raise ValueError(f"through={through!r}: only BETWEEN or IDLE (moves R3 never "
                             "blocks) may go first in a combined report")
        request = trainer_pb2.ReportPhaseRequest(model=model, rank=rank,
                                                 phase=phase_value(phase), lease_id=lease_id,
                                                 reestablishing=reestablishing)
        if step is not None:
            request.step = step
        if through is not None:
            request.through = phase_value(through)
        if publish_step is not None:
            request.publish_step = publish_step
        if timeout is None:
            timeout = self.timeout
        if deadline_ms is None:
            return PhaseReport.from_proto(self._call(self._trainer.ReportPhase, request, True,
                                                     timeout))
        end = time.monotonic() + deadline_ms / 1000.0
        waited_ms = 0
        while True:
            remaining_ms = max(0, int((end - time.monotonic()) * 1000.0))
            slice_ms = remaining_ms if timeout is None else min(
                remaining_ms, max(1, int(timeout * _R3_SLICE_OF_TIMEOUT * 1000.0)))
            request.deadline_ms = slice_ms
            try:
                response = self._call(self._trainer.ReportPhase, request, True, timeout)
            except SummonError as error:
                # summond answered that the session still holds the unit:
                # it is alive, so ask again until the whole wait is spent.
                if (error.code == "DEADLINE_EXCEEDED" and not unreachable(error)
                        and time.monotonic() < end):
                    waited_ms += slice_ms
                    request.ClearField("through")  # made: only the second move waits
                    continue
                raise
            report = PhaseReport.from_proto(response)
            return dataclasses.replace(report, waited_ms=waited_ms + report.waited_ms)

    def map_shards(self, model: str, rank: int) -> ShardMap:
        return ShardMap.from_proto(self._call(
            self._trainer.MapShards, trainer_pb2.MapShardsRequest(model=model, rank=rank),
            True))

    def mark_initialized(self, model: str, lease_id: str = "") -> list[UnitGeneration]:
        response = self._call(self._trainer.MarkInitialized,
                              trainer_pb2.MarkInitializedRequest(model=model,
                                                                 lease_id=lease_id), True)
        return [UnitGeneration.from_proto(u) for u in response.units]

    def watch_units(self, model: str, every_change: bool = False) -> UnitWatch:
        """A stream of every unit's counters: now, then at each external write
        (with every_change, at each generation move too). No deadline."""
        return UnitWatch(self._trainer.WatchUnits(
            trainer_pb2.WatchUnitsRequest(model=model, every_change=every_change),
            metadata=self._metadata))
