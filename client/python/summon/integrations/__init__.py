"""summon where people already train: one line in a framework's own script.

- `summon.integrations.hf.SummonCallback`: the Hugging Face `Trainer`;
- `summon.integrations.accelerate.serve(accelerator, model, name)`: Accelerate;
- `summon.integrations.lightning.SummonCallback`: Lightning's `FSDPStrategy`
  and `ModelParallelStrategy` (FSDP2).

Each serves the model the framework sharded with `summon.torch.serve` and
reports the phases from the framework's own events; none changes how the
framework shards. The modules import their framework lazily, so importing
this package needs none of them. DCP checkpoints: `summon.dcp`.
"""
