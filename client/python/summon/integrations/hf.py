"""The Hugging Face Trainer serves its model through summon: one callback.

    trainer = Trainer(model, args, train_dataset=..., callbacks=[SummonCallback("llama")])

At `on_train_begin` the Trainer has wrapped the model (FSDP through
Accelerate, `TrainingArguments(fsdp=..., fsdp_config=...)`) and built its
optimizer: the callback serves that model (every rank). Forward and backward
are reported by serve's module hooks; the optimizer step by the Trainer's own
`on_pre_optimizer_step` (OPTIMIZER) and `on_optimizer_step` (IDLE, a step
counted), so gradient accumulation's micro-batches stay inside one step. At
`on_train_end` serving stops (the model stays in summond).
"""

from __future__ import annotations

from typing import Any, Optional

from transformers import TrainerCallback

from summon.client import Client
from summon.serve import Served, serve


class SummonCallback(TrainerCallback):
    """Serves the model the Trainer wrapped as summon model `name`.

    options go to summon.torch.serve (client, grads, wait, on_external_write,
    lease_seconds). A model the Trainer did not shard with FSDP (DDP, one
    process) is refused with ValueError at the start of training.
    """

    def __init__(self, name: str, *, client: Optional[Client] = None, **options: Any):
        self.name = name
        self.client = client
        self.options = options
        self.served: Optional[Served] = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        if self.served is not None:  # train() called again: serve the new wrapping
            self.served.close()
        self.served = serve(model, self.name, client=self.client, optimizer_events=True,
                            **self.options)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any,
                              **kwargs: Any) -> None:
        if self.served is not None:
            self.served.begin_optimizer_step()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.served is not None:
            self.served.end_step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.served is not None:
            self.served.close()
            self.served = None
