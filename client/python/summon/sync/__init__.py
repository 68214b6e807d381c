"""summon.sync: weight sync from a training job into an inference engine.

A sync plan (SyncPlan, a JSON file or the same object) says, for each
tensor-parallel rank of the engine, which boxes of which trainer tensors make
each engine parameter (fused, padded, in the engine's dtype); plan_for
generates it from a Hugging Face config by vLLM's rules; pull reads a rank's
boxes of a published version from summond; load_into copies the results into
a live vLLM model. See docs/api.md#weight-sync-plans-and-summonsync.
"""

from summon.sync.plan import Entry, Piece, SyncPlan, check_box
from summon.sync.pull import apply_plan, assemble, itemsize, load_into, pull
from summon.sync.rules import pad_vocab, plan_for

__all__ = ["Entry", "Piece", "SyncPlan", "apply_plan", "assemble", "check_box", "itemsize",
           "load_into", "pad_vocab", "plan_for", "pull"]
