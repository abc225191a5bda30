"""The `upcycle` config group: growing a model, in-run at step `step` (the
trainer) or between checkpoints (python -m moe_jax.upcycle)."""
import dataclasses

from moe_jax.schema.field import field


@dataclasses.dataclass(frozen=True)
class UpcycleConfig:
  """The target config is the source config with the recipe's own change (its
  `target` in upcycle/recipes/: experts x factor for expand_experts, ...) and
  then `target`'s overrides (nested groups, e.g. target.moe.num_experts for
  dense_to_moe). These defaults are the config's (configs/common.py builds the
  group from them). `step` is a step of the run: workdir/config_check.py
  checks it against total_steps; each recipe checks its args (expand_experts:
  utility_metric, which is also its arg). Every key with `added` but
  split_bias came with the in-run transition (3486b55): no run before it
  grew in-run."""
  step: int = field(0, at_least=0, shape=True)   # in-run transition step tau (0: none)
  # a recipe of upcycle/recipes/ (dense_to_moe, ...)
  recipe: str = field('', shape=True)
  # expansion factor m (experts, or depth)
  factor: int = field(2, at_least=2, added=2, shape=True)
  # expand_experts: router biases x 1/m (its args.split_bias; a9e83fc)
  split_bias: bool = field(False, added=False)
  args: dict = field({})         # recipe options: its file in recipes/
  target: dict = field({}, added={})   # overrides of the target config
  # args.allocation=utility: grad_norm | saliency | weight_norm | curvature, over
  # this many batches (curvature needs many: utility.py); expand_experts' args
  # of the same names take these unless set.
  utility_metric: str = field('grad_norm', added='grad_norm')
  utility_batches: int = field(64, at_least=0, added=8)
  # Validation batches for the function-preservation report: two forward passes
  # each (SmolLM2-135M's whole upcycle at 4, batch 8 x 512: 7 min of CPU,
  # docs/interop.md; laptop minutes).
  report_batches: int = field(4, at_least=0, added=4)
  seed: int = field(0, at_least=0, added=0)   # noise and fresh inits of the transform
  # provenance: the checkpoint this run was upcycled from
  source: str = field('', added='')
