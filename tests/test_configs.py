"""Every config file builds a valid config (full-size ones only as shapes),
from groups that are their dataclasses' defaults."""
import importlib
import os

import pytest

from configs import common, lm_dense, lm_moe, quickstart
from experiments import hyper
from configs.upcycle import dense_to_moe, expand_experts, grow_depth, grow_width
from moe_jax import schema
from moe_jax.models import config as model_config
from moe_jax.schema import field
from moe_jax.upcycle import recipes, transition


def test_base_is_the_dataclasses_defaults():
  """Each key of base() is a field of its group's dataclass, with its default:
  the one home of both."""
  config = common.base().to_dict()
  groups = {k: cls for k, cls in schema.GROUPS.items() if k}
  assert {k: config.pop(k) for k in groups} == {
      k: field.defaults(cls) for k, cls in groups.items()}
  assert config == field.defaults(schema.GROUPS[''])
  assert common.base().grad_accum_steps == 0   # auto (an old config.json without it reads 1)


def _quickstart_runs():
  """{run name: config} of the quickstart's sweep (its points applied by hand)."""
  out = {}
  for point in quickstart.get_hyper(hyper):
    config = quickstart.get_config()
    for key, value in point.items():
      if key.startswith('config.'):
        *groups, leaf = key.split('.')[1:]
        node = config
        for g in groups:
          node = node[g]
        node[leaf] = value
    out[point['name']] = config
  return out


@pytest.mark.parametrize('get_config, arg', [
    (lm_dense.get_config, 'tiny'), (lm_dense.get_config, 'dense_1b'),
    (lm_moe.get_config, 'tiny'), (lm_moe.get_config, None), (lm_moe.get_config, 'full_10layer'),
] + [(lambda name: _quickstart_runs()[name], f'{arm}_s0') for arm in quickstart.ARMS])
def test_training_configs_validate(get_config, arg):
  config = get_config(arg)
  model_config.from_config(config, vocab_size=259)
  if config.upcycle.step:
    config.model.vocab_size = config.model.vocab_size or 259
    grown = transition.target_config(config)
    assert grown.upcycle.step == 0 and grown.moe.num_experts >= config.moe.num_experts


def test_quickstart_runs_share_one_token_budget_and_grow_to_fixed_2e():
  configs = _quickstart_runs()
  assert len({(c.total_steps, c.batch_size, c.seq_len) for c in configs.values()}) == 1
  want = configs['fixed2x_s0'].moe
  for name in ('upcycled_s0', 'sparse_s0'):
    config = configs[name]
    config.model.vocab_size = 259
    grown = transition.target_config(config).moe
    assert (grown.num_experts, grown.top_k, grown.d_ff) == (want.num_experts, want.top_k,
                                                            want.d_ff)


@pytest.mark.parametrize('module', [dense_to_moe, expand_experts, grow_width, grow_depth])
def test_upcycle_configs_name_their_recipe(module):
  up = module.get_config()
  assert up.recipe == module.__name__.rsplit('.', 1)[-1] and up.step == 0


# Options a recipe's config file leaves out: set by the recipe's `prepare` or
# the command line (scores, router_rows, num_sources), by an in-run transition's
# config (opt_policy: the upcycle command writes no optimizer state), or taken
# from the group's `upcycle.factor` where the args have none (factor).
_NOT_A_USERS = {'scores', 'router_rows', 'num_sources', 'opt_policy', 'factor'}
_UPCYCLE_CONFIGS = sorted(f[:-3] for f in os.listdir(os.path.dirname(dense_to_moe.__file__))
                          if f.endswith('.py') and f != '__init__.py')


@pytest.mark.parametrize('name', _UPCYCLE_CONFIGS)
def test_an_upcycle_config_holds_every_option_of_its_recipe(name):
  """Each option a user sets is a key of the config file's `args`, so
  `--config.args.KEY=...` reaches it (a key the file lacks is refused)."""
  up = importlib.import_module(f'configs.upcycle.{name}').get_config()
  assert up.recipe == name
  assert set(recipes.defaults(name)) - _NOT_A_USERS == set(up.args)


def test_unknown_config_argument_is_refused():
  with pytest.raises(ValueError, match="'experts_x'"):
    dense_to_moe.get_config('experts_x=3')
