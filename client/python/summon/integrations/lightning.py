"""Lightning serves its sharded model through summon: one callback.

    trainer = L.Trainer(strategy=ModelParallelStrategy(...),  # or FSDPStrategy(...)
                        callbacks=[SummonCallback("llama")])

At `on_fit_start` the strategy has sharded the module (FSDPStrategy wraps it
in FullyShardedDataParallel; ModelParallelStrategy runs the module's
`configure_model`, where `fully_shard` is applied) and set up the optimizer:
the callback serves `trainer.strategy.model` (every rank). Lightning calls
`training_step`, not the module's forward, so the phases come from
Lightning's own hooks: a batch starts FORWARD, `on_before_backward` BACKWARD,
`on_before_optimizer_step` OPTIMIZER, the batch's end IDLE (a step counted
where the optimizer stepped). Validation batches are FORWARD then IDLE. At
`on_fit_end` serving stops (the model stays in summond).
"""

from __future__ import annotations

from typing import Any, Optional

from lightning.pytorch import Callback

from summon.client import Client
from summon.serve import Served, serve


class SummonCallback(Callback):
    """Serves the model Lightning's strategy sharded as summon model `name`.

    options go to summon.torch.serve (client, grads, wait, on_external_write,
    lease_seconds). A model the strategy did not shard with FSDP (DDP, one
    device) is refused with ValueError when the fit starts.
    """

    def __init__(self, name: str, *, client: Optional[Client] = None, **options: Any):
        self.name = name
        self.client = client
        self.options = options
        self.served: Optional[Served] = None

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        model = trainer.strategy.model or pl_module
        self.served = serve(model, self.name, client=self.client, module_hooks=False,
                            optimizer_events=True, **self.options)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        if self.served is not None:
            self.served.begin_step()

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self.served is not None:
            self.served.begin_backward()

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self.served is not None:
            self.served.end_backward()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.served is not None:
            self.served.begin_optimizer_step()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.served is not None:
            self.served.end_step()

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.served is not None:
            self.served.begin_step()

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any,
                                batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.served is not None:
            self.served.end_step()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.served is not None:
            self.served.close()
            self.served = None
