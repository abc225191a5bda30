"""The `upcycle` config group: growing a model, in-run at step `step` (the
trainer) or between checkpoints (python -m moe_jax.upcycle)."""
import dataclasses

from moe_jax.config_group import field


@dataclasses.dataclass(frozen=True)
class UpcycleConfig:
  """The target config is the source config with the recipe's own change (its
  `target` in upcycle/recipes/: experts x factor for expand_experts, ...) and
  then `target`'s overrides (nested groups, e.g. target.moe.num_experts for
  dense_to_moe). These defaults are the config's (configs/common.py builds the
  group from them). `step` is a step of the run: workdir/config_check.py
  checks it against total_steps; transition.target_config the other bounds,
  and each recipe its args (its options, in its file)."""
  step: int = 0                  # in-run transition step tau (0: none)
  recipe: str = ''               # a recipe of upcycle/recipes/ (dense_to_moe, ...)
  factor: int = field(2, at_least=2)   # expansion factor m (experts, or depth)
  args: dict = dataclasses.field(default_factory=dict)    # recipe options: its file in recipes/
  target: dict = dataclasses.field(default_factory=dict)  # overrides of the target config
  # Validation batches for the function-preservation report: two forward passes
  # each (SmolLM2-135M's whole upcycle at 4, batch 8 x 512: 7 min of CPU,
  # docs/interop.md; laptop minutes).
  report_batches: int = field(4, at_least=0)
  seed: int = field(0, at_least=0)   # noise and fresh inits of the transform
  source: str = ''               # provenance: the checkpoint this run was upcycled from
