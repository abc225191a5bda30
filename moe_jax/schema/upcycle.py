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
  checks it against total_steps; each recipe its own args (`args`, parsed
  into the recipe's options: upcycle/recipes/). Every key with `added` came
  with the in-run transition (3486b55): no run before it grew in-run."""
  step: int = field(0, at_least=0, shape=True)   # in-run transition step tau (0: none)
  # a recipe of upcycle/recipes/ (dense_to_moe, ...)
  recipe: str = field('', shape=True)
  # expansion factor m (experts, or depth)
  factor: int = field(2, at_least=2, added=2, shape=True)
  args: dict = field({})         # recipe options: its file in recipes/
  target: dict = field({}, added={})   # overrides of the target config
  # Validation batches for the function-preservation report: two forward passes
  # each (SmolLM2-135M's whole upcycle at 4, batch 8 x 512: 7 min of CPU,
  # docs/interop.md; laptop minutes).
  report_batches: int = field(4, at_least=0, added=4)
  seed: int = field(0, at_least=0, added=0)   # noise and fresh inits of the transform
  # provenance: the checkpoint this run was upcycled from
  source: str = field('', added='')


# Keys of the group that became one recipe's args (upcycle.args.KEY), each
# with its default then, which that recipe's arg of the same name has too:
# the recipe read the group's value wherever its args left the key out.
MOVED_TO_ARGS = {'utility_metric': 'grad_norm', 'utility_batches': 64, 'split_bias': False}


def upgrade_recipe_args(record):
  """An old config's upcycle.KEY of MOVED_TO_ARGS moved to upcycle.args.KEY
  where the args leave it out (as the recipe read it), and dropped where it
  holds its default (what the recipe's own default gives), so a config
  written before the move reads as the same run (in place; returned).

  Knowing no recipe, this moves a value that is not the default whatever
  upcycle.recipe names: every config saved so far with one (the committed
  results of docs/ included) names the recipe that had these args or none;
  a recipe without them then refuses the key (recipes.parse) rather than
  ignoring it."""
  up = record.get('upcycle')
  if not isinstance(up, dict):
    return record
  for key, default in MOVED_TO_ARGS.items():
    if key in up:
      value = up.pop(key)
      if value != default:
        up.setdefault('args', {}).setdefault(key, value)
  return record
