"""Every config file builds a valid config (full-size ones only as shapes)."""
import pytest

from configs import lm_dense, lm_moe, quickstart
from configs.upcycle import dense_to_moe, expand_experts, grow_depth, grow_width
from moe_jax.models import config as model_config
from moe_jax.upcycle import transition


@pytest.mark.parametrize('get_config, arg', [
    (lm_dense.get_config, 'tiny'), (lm_dense.get_config, 'dense_1b'),
    (lm_moe.get_config, 'tiny'), (lm_moe.get_config, None), (lm_moe.get_config, 'full_10layer'),
] + [(quickstart.get_config, run) for run in quickstart.RUNS])
def test_training_configs_validate(get_config, arg):
  config = get_config(arg)
  model_config.ModelConfig.from_config(config, vocab_size=259)
  if config.upcycle.step:
    config.model.vocab_size = config.model.vocab_size or 259
    grown = transition.target_config(config)
    assert grown.upcycle.step == 0 and grown.moe.num_experts >= config.moe.num_experts


def test_quickstart_runs_share_one_token_budget():
  configs = [quickstart.get_config(run) for run in quickstart.RUNS]
  assert len({(c.total_steps, c.batch_size, c.seq_len) for c in configs}) == 1
  grown = transition.target_config(quickstart.get_config('upcycled'))
  assert grown.moe.num_experts == quickstart.get_config('fixed2x').moe.num_experts


@pytest.mark.parametrize('module', [dense_to_moe, expand_experts, grow_width, grow_depth])
def test_upcycle_configs_name_their_recipe(module):
  up = module.get_config()
  assert up.recipe == module.__name__.rsplit('.', 1)[-1] and up.step == 0


def test_unknown_config_argument_is_refused():
  with pytest.raises(ValueError, match="'experts_x'"):
    dense_to_moe.get_config('experts_x=3')
