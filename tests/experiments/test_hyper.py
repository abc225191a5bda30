"""The sweep vocabulary, and how points become named, ordered runs."""
import pytest

from experiments import hyper, sweep
from moe_jax.errors import ConfigError

_CONFIG = '''
from configs import lm_moe
def get_config(arg=None):
  return lm_moe.get_config('tiny')
'''


def _plan(tmp_path, hyper_body):
  path = tmp_path / 'sweep.py'
  path.write_text(_CONFIG + 'def get_hyper(h):\n  return ' + hyper_body + '\n')
  return sweep.plan(str(path))[1]


def test_product_varies_the_last_factor_fastest():
  points = hyper.product([hyper.sweep('a', [1, 2]), hyper.sweep('b', ['x', 'y']),
                          hyper.fixed('c', 0)])
  assert points == [dict(a=1, b='x', c=0), dict(a=1, b='y', c=0), dict(a=2, b='x', c=0),
                    dict(a=2, b='y', c=0)]


def test_zip_chain_and_fixed():
  zipped = hyper.zipit([hyper.sweep('a', [1, 2]), hyper.sweep('b', [3, 4]),
                        hyper.fixed('c', 5, length=2)])
  assert zipped == [dict(a=1, b=3, c=5), dict(a=2, b=4, c=5)]
  chained = hyper.chainit([hyper.fixed('a', 0), zipped])
  assert chained == [dict(a=0), dict(a=1, b=3, c=5), dict(a=2, b=4, c=5)]
  chained[0]['a'] = 9   # points are fresh dicts: editing one edits no other
  assert hyper.fixed('a', 0, length=2) == [dict(a=0), dict(a=0)] and zipped[0]['a'] == 1
  assert hyper.product([]) == [{}] and hyper.chainit([]) == []


@pytest.mark.parametrize('build, message', [
    (lambda: hyper.zipit([hyper.sweep('a', [1, 2]), hyper.sweep('b', [1])]),
     r'zipit: sweeps of different lengths \[2, 1\]'),
    (lambda: hyper.product([hyper.sweep('a', [1]), hyper.fixed('a', 2)]),
     "product: key 'a' is set by two"),
    (lambda: hyper.zipit([hyper.sweep('a', [1]), hyper.sweep('a', [2])]),
     "zipit: key 'a' is set by two"),
])
def test_ill_formed_sweeps_are_refused(build, message):
  with pytest.raises(ConfigError, match=message):
    build()


def test_run_refers_to_a_workdir_or_one_checkpoint():
  assert hyper.run('dense') == '{run:dense}'
  assert hyper.run('dense', step=200) == '{run:dense}/checkpoints/200'
  assert sweep.resolve(hyper.run('dense', 2), '/s') == '/s/dense/checkpoints/2'


def test_names_come_from_the_keys_that_vary(tmp_path):
  runs = _plan(tmp_path, "h.product([h.fixed('config.total_steps', 4), "
               "h.sweep('config.moe.num_experts', [4, 8]), "
               "h.sweep('config.opt.lr', [1e-3, 3e-4])])")
  assert [r.name for r in runs] == ['num_experts=4_lr=0.001', 'num_experts=4_lr=0.0003',
                                    'num_experts=8_lr=0.001', 'num_experts=8_lr=0.0003']
  assert runs[1].overrides == {'config.total_steps': 4, 'config.moe.num_experts': 4,
                               'config.opt.lr': 3e-4}
  assert [sweep.flag(k, v) for k, v in runs[1].overrides.items()] == [
      '--config.total_steps=4', '--config.moe.num_experts=4', '--config.opt.lr=0.0003']
  # One point: nothing varies.
  assert [r.name for r in _plan(tmp_path, "[{}]")] == ['run']


def test_labels_tell_keys_with_one_leaf_apart():
  keys = ['config.moe.d_ff', 'config.model.d_ff', 'config.seed', 'upcycle.src']
  assert sweep.labels(keys) == {'config.moe.d_ff': 'moe.d_ff', 'config.model.d_ff': 'model.d_ff',
                                'config.seed': 'seed', 'upcycle.src': 'src'}


def test_long_names_are_cut_with_a_stable_hash(tmp_path):
  body = "h.sweep('config.data.patterns', ['/data/' + 'x' * 100 + str(i) for i in range(2)])"
  names = [r.name for r in _plan(tmp_path, body)]
  assert len(set(names)) == 2 and all(len(n) == sweep.MAX_NAME for n in names)
  assert names == [r.name for r in _plan(tmp_path, body)]


def test_parents_start_first_and_names_and_flags_show_them(tmp_path):
  runs = _plan(tmp_path, """h.chainit([
      h.zipit([h.sweep('config.init_from', [h.run('base', step=100), h.run('base')]),
               h.sweep('config.seed', [1, 2])]),
      h.product([h.fixed('name', 'base'), h.fixed('config.ckpt.keep_every', 100)]),
      h.product([h.fixed('name', 'grown'),
                 h.fixed('upcycle.config', 'configs/upcycle/expand_experts.py:factor=2'),
                 h.fixed('upcycle.src', h.run('init_from=base_seed=2', step=300))]),
  ])""")
  assert [(r.name, r.parents) for r in runs] == [
      ('base', ()), ('init_from=base@100_seed=1', ('base',)), ('init_from=base_seed=2', ('base',)),
      ('grown', ('init_from=base_seed=2',))]
  init_from = sweep.resolve(runs[1].overrides['config.init_from'], '/s')
  assert sweep.flag('config.init_from', init_from) == '--config.init_from=/s/base/checkpoints/100'
