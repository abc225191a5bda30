"""Seed 004's grid as a sweep: the commands of its runs (chained upcycles,
evaluations), its table, and the :small grid end to end."""
import json
import os
import sys

import numpy as np
import pytest

from experiments import hyper, runner
from experiments.moesturizer import config as moesturizer, letter_probe, parting, table
from moe_jax.workdir import files
from tests.eval import olmo_fixture
from tests.experiments import runs

_SPEC = os.path.join(runs.REPO, 'experiments', 'moesturizer', 'config.py')


def test_a_chained_upcycle_grows_twice_then_trains_then_evaluates():
  overrides = {'upcycle.config': 'a.py:x=1 + b.py:y=2', 'upcycle.src': '/base',
               'config.seed': 1, 'eval.args': '--tasks=arc_easy --limit=2 ; --tasks=gsm8k'}
  stages = runner.commands('/sw', 'cfg.py:small', 'run', overrides)
  assert [s for s, _ in stages] == ['upcycle', 'upcycle', 'train', 'evaluate', 'evaluate']
  (_, grow1), (_, grow2), (_, train), (_, ev0), (_, ev1) = stages
  assert grow1[-2:] == ['--src=/base', '--dst=/sw/run/.upcycle/step0']
  assert grow2[-2:] == ['--src=/sw/run/.upcycle/step0', '--dst=/sw/run/.upcycle/dst']
  assert grow2[3].endswith('b.py:y=2') and '--config.seed=1' in train
  assert ev0[3:] == ['--ckpt=/sw/run', '--tasks=arc_easy', '--limit=2',
                     '--out=/sw/run/benchmarks.0.jsonl']
  assert ev1[-1] == '--out=/sw/run/benchmarks.1.jsonl'
  only_eval = runner.commands('/sw', 'cfg.py', 'base', {'eval.ckpt': '/m', 'eval.args': '--x=1'})
  assert only_eval == [('evaluate', [sys.executable, '-m', 'moe_jax.evaluate', '--ckpt=/m',
                                     '--x=1', '--out=/sw/base/benchmarks.0.jsonl'])]


def test_the_grids(monkeypatch):
  names = lambda arg: [p['name'] for p in moesturizer.get_hyper(hyper, arg)]
  assert names('small') == ['base', 'larger', 'sft_s0', 'dus40_s0', 'moe4-2_s0',
                            'dus40_moe4-2_s0', 'larger_sft_s0']
  assert names('seeds=3,grid=reduced') == ['base', 'larger'] + [
      f'{r}_s{s}' for s in range(3) for r in ('sft', 'dus40', 'moe4-2', 'larger_sft')]
  points = {p['name']: p for p in moesturizer.get_hyper(hyper, 'small')}
  # Seed 004's router, eq. 3: unnormalised top-k gates, in the upcycle and in training.
  assert points['moe4-2_s0']['config.moe.renormalize'] is False
  assert points['moe4-2_s0']['upcycle.config'].endswith('bias=False,renormalize=False')
  scaled = {p['name']: p for p in moesturizer.get_hyper(hyper, 'small,rescale=gate_mass,'
                                                                'router_std=0.001')}
  assert scaled['moe4-2_s0']['upcycle.config'].endswith(
      'renormalize=False,rescale=gate_mass,router_std=0.001')
  assert 'config.opt.router_lr_multiplier' not in scaled['moe4-2_s0']
  fast = {p['name']: p for p in moesturizer.get_hyper(hyper, 'small,router_lr=10')}
  assert fast['moe4-2_s0']['config.opt.router_lr_multiplier'] == 10
  assert fast['dus40_moe4-2_s0']['config.opt.router_lr_multiplier'] == 10
  assert 'config.opt.router_lr_multiplier' not in fast['sft_s0']
  solar = {p['name']: p for p in moesturizer.get_hyper(hyper, 'small,dus_placement=solar')}
  assert solar['dus40_s0']['upcycle.config'].endswith('method=dus,percent=40,placement=solar')
  assert solar['dus40_moe4-2_s0']['upcycle.config'].startswith(
      f'{moesturizer.GROW_DEPTH}:method=dus,percent=40,placement=solar + ')
  assert points['dus40_s0']['upcycle.config'].endswith('grow_depth.py:method=dus,percent=40')
  assert 'config.moe.num_experts' not in points['dus40_s0']
  # The tiny Larger Dense holds 2 copies' worth of MLP: MoE 4-2's active size.
  assert points['larger']['config.model.d_ff'] == points['larger_sft_s0']['config.model.d_ff'] \
      == 2 * moesturizer.get_config('small').model.d_ff
  dus = next(p for p in moesturizer.get_hyper(hyper, 'small') if p['name'].startswith('dus'))
  assert dus['config.model.num_layers'] == 3   # the tiny base has 2 layers; 40 % adds 1
  assert dus['eval.args'] == ('--tasks=arc_easy,gsm8k --mode=generate --limit=2 --max_new_tokens=8'
                              ' ; --tasks=arc_easy --mode=loglik --limit=2')
  # A real base needs no run: its evaluation goes last, after the long SFT runs.
  tiny = moesturizer._base_config(moesturizer._arg('small'))
  monkeypatch.setattr(moesturizer, '_base_config', lambda arg, base=None: tiny)
  real = moesturizer.get_hyper(hyper, 'base=/b,grid=reduced,seeds=1,limit=200,long_limit=50')
  assert [p['name'] for p in real] == ['sft_s0', 'dus40_s0', 'moe4-2_s0', 'base']
  assert real[-1]['eval.args'].split(' ; ') == [
      '--tasks=arc_easy,arc_challenge,hellaswag,mmlu --mode=generate --limit=200',
      '--tasks=gsm8k,math500 --mode=generate --limit=50',
      '--tasks=arc_easy,arc_challenge,hellaswag,mmlu --mode=loglik --limit=200']
  with_larger = moesturizer.get_hyper(hyper, 'base=/b,larger=/l,grid=reduced,seeds=1')
  assert [p['name'] for p in with_larger] == ['sft_s0', 'dus40_s0', 'moe4-2_s0', 'larger_sft_s0',
                                              'base', 'larger']
  larger_sft = with_larger[3]   # trained from /l with its own shapes (the base's config else)
  assert larger_sft['config.init_from'] == '/l' and larger_sft['config.model.d_ff'] == tiny.model.d_ff
  assert with_larger[-1]['eval.ckpt'] == '/l'
  # larger=wide: the base widened to MoE 4-2's active size, only its SFT row
  # (as it is, it computes the base's function); long=False: MC tasks only.
  wide = moesturizer.get_hyper(hyper, 'base=/b,larger=wide,grid=reduced,seeds=1,long=False')
  assert [p['name'] for p in wide] == ['sft_s0', 'dus40_s0', 'moe4-2_s0', 'larger_sft_s0', 'base']
  assert wide[3]['upcycle.config'].endswith('widen_mlp.py:factor=2')
  assert (wide[3]['upcycle.src'], wide[3]['config.model.d_ff']) == ('/b', 2 * tiny.model.d_ff)
  assert [a.split(' --mode=')[0] for a in wide[-1]['eval.args'].split(' ; ')] == [
      '--tasks=arc_easy,arc_challenge,hellaswag,mmlu'] * 2
  small = moesturizer.get_hyper(hyper, 'small,seeds=2,data_dir=/d')
  assert [p['name'] for p in small][-1] == 'larger_sft_s1'
  assert all('--data_dir=/d' in a for a in small[0]['eval.args'].split(' ; '))


def test_an_upcycled_workdir_may_train_on_another_stream_until_it_has(tmp_path):
  config = moesturizer.get_config('small')
  saved = config.copy_and_resolve_references()
  saved.data.source = 'shakespeare'
  files.write_config(str(tmp_path), saved)
  os.makedirs(tmp_path / 'checkpoints' / '0' / 'params')
  files.check_compatible(config, str(tmp_path))   # params only (an import)
  os.makedirs(tmp_path / 'checkpoints' / '0' / 'data')
  files.check_compatible(config, str(tmp_path))   # and the source's position (an upcycle)
  os.makedirs(tmp_path / 'checkpoints' / '5' / 'opt_state')
  os.makedirs(tmp_path / 'checkpoints' / '5' / 'data')
  with pytest.raises(Exception, match='another data stream'):   # a run has trained here
    files.check_compatible(config, str(tmp_path))


def test_table_pools_seeds(tmp_path):
  for run, acc in (('base', 0.5), ('sft_s0', 0.25), ('sft_s1', 0.75)):
    os.makedirs(tmp_path / run)
    (tmp_path / run / 'benchmarks.0.jsonl').write_text(json.dumps(dict(
        task='arc_easy', mode='generate', n=4, accuracy=acc, ci95=[0.1, 0.9])) + '\n')
  text = table.table(str(tmp_path))
  assert '| base | 50.0 [10, 90] | not recorded | - | - |' in text
  assert '| sft | 50.0 [15, 85] (25.0-75.0, 2 seeds) | not recorded | - | - |' in text


def test_table_shows_the_answer_letters_in_both_modes(tmp_path):
  for run, letters in (('base', {'A': 1, 'B': 1, 'C': 2}), ('sft_s0', {'B': 4})):
    os.makedirs(tmp_path / run)
    texts = dict(choice_text=dict(written=3, right=2, letter_agrees=1)) if run == 'sft_s0' else {}
    (tmp_path / run / 'benchmarks.0.jsonl').write_text(''.join(json.dumps(dict(
        task='arc_easy', mode=mode, n=4, accuracy=0.25, ci95=[0.1, 0.9], letters=letters,
        gold_letters={'A': 2, 'B': 1, 'D': 1}, **texts)) + '\n'
        for mode in ('generate', 'loglik')))
  text = table.table(str(tmp_path))
  for mode, base_text, sft_text in (('generate', ' - |', ' 2 / 3 (1) |'), ('loglik', '', '')):
    section = text.split(f'### {mode}')[1].split('###')[0]
    assert f'| base | 25.0 [10, 90] | A 25 / B 25 / C 50 |{base_text} - |' in section
    assert f'| sft | 25.0 [10, 90] | B 100 |{sft_text} - |' in section
    assert 'gold letters of the questions (% of MC questions): A 50 / B 25 / D 25' in section


def test_table_shows_the_router_of_the_last_logged_step(tmp_path):
  """Two seeds of an MoE run with 2 layers of 4 experts: the last row with
  router metrics counts (a later row without them, the final eval, does not).
  A third seed still training (no benchmarks yet) is left out."""
  for seed, (entropy, cv, top) in enumerate(((1.0, 0.2, 0.6), (1.2, 0.4, 0.8), (0.1, 2.0, 1.0))):
    run = tmp_path / f'moe4-2_s{seed}'
    os.makedirs(run)
    if seed < 2:   # written after training
      (run / 'benchmarks.0.jsonl').write_text(json.dumps(dict(
          task='arc_easy', mode='loglik', n=4, accuracy=0.5, ci95=[0.1, 0.9])) + '\n')
    early = {f'moe/layers_{i}/{k}': v for i in (0, 1) for k, v in (
        ('entropy', 1.386), ('cv', 0.0), ('load', [0.25] * 4))}
    late = {f'moe/layers_{i}/{k}': v for i in (0, 1) for k, v in (
        ('entropy', entropy + (0.1 if i else -0.1)), ('cv', cv),
        ('load', [top, 1 - top, 0.0, 0.0]))}
    (run / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in (
        dict(step=1, loss=2.0, **early), dict(step=2, loss=1.0, **{'moe/dispatch/x': 1}, **late),
        dict(step=2, val_loss=1.5))))
  text = table.table(str(tmp_path))
  assert ('| moe4-2 | 50.0 [15, 85] (50.0-50.0, 2 seeds) | not recorded | '
          'H 1.100 / 1.386, CV 0.30, max load 70 % |') in text


# CI runs the chained upcycle (DUS 40 then MoE 4-2: both upcycle configs, the
# unnormalised router's statistics) and the SFT of the base beside the stand-in
# base they start from: 3 runs, 8 processes. The other rows take the same code
# paths (one upcycle of the chain, SFT of the other stand-in); the whole grid
# (7 runs, 16 processes, ~3 minutes) is the slow variant.
_CHAIN_AND_SFT = 'dus40_moe4-2_s0,sft_s0'


@pytest.mark.parametrize('only', [_CHAIN_AND_SFT, pytest.param('', marks=pytest.mark.slow)])
def test_small_grid_end_to_end(only, tmp_path, jax_cache):
  data = olmo_fixture.write_eval(str(tmp_path / 'olmo_eval'))
  workdir = tmp_path / 'grid'
  code, _, err = runs.run('experiments.launch', f'--config={_SPEC}:small,data_dir={data}',
                          f'--workdir={workdir}', *([f'--only={only}'] if only else []),
                          cache_dir=jax_cache)
  assert code == 0, err[-3000:]
  text = table.table(str(workdir))
  rows = (('base', 'sft', 'dus40_moe4-2') if only else
          ('base', 'larger', 'sft', 'dus40', 'moe4-2', 'dus40_moe4-2', 'larger_sft'))
  for row in rows:
    assert f'| {row} |' in text
  for moe in ('moe4-2', 'dus40_moe4-2')[bool(only):]:
    moe_row = next(line for line in text.splitlines() if line.startswith(f'| {moe} |'))
    assert ' | H ' in moe_row and ', CV ' in moe_row   # the router's statistics
  assert 'arc_easy (n=2)' in text and 'gsm8k (n=2)' in text


def test_letter_probe_summary_and_its_table(tmp_path):
  """Three questions, hand-made letter log-probabilities: the argmax letters,
  the gold letter's loss over the vocabulary and among the letters."""
  p = np.log(np.array([[0.4, 0.2, 0.1, 0.1],     # picks A, gold A
                       [0.5, 0.1, 0.1, 0.1],     # picks A, gold C
                       [0.1, 0.6, 0.1, 0.0]]))   # picks B, gold B; D is not a choice
  p[2, 3] = -np.inf
  got = letter_probe.summarise(p, [0, 2, 1], np.exp(p).sum(1))
  assert (got['n'], got['letters'], got['gold_letters']) == (3, {'A': 2, 'B': 1},
                                                              {'A': 1, 'B': 1, 'C': 1})
  assert got['accuracy'] == 2 / 3
  np.testing.assert_allclose(got['letter_loss'], -np.log([0.4, 0.1, 0.6]).mean())
  np.testing.assert_allclose(got['letter_loss_among'],
                             -np.log([0.4 / 0.8, 0.1 / 0.8, 0.6 / 0.8]).mean())
  np.testing.assert_allclose(got['letter_mass'], (0.8 + 0.8 + 0.8) / 3)
  path = tmp_path / 'probe.json'
  path.write_text(json.dumps(dict(rows=[dict(model='Base', command='c', lines=[
      dict(task='arc_easy', **got)], train_loss=[[1, 0.5], [20, 0.25]])])))
  row = letter_probe.from_results(str(path)).splitlines()[2]
  assert row.startswith('| Base | arc_easy (3) | 66.7 [') and '| A 67 / B 33 | A 33 / B 33 / C 33 |' in row
  assert row.endswith('| 0.80 | 0.500 (step 1) -> 0.250 (step 20) |')


def test_parting_measures_change_and_the_experts_spread():
  """Two copies of one expert that move apart, a router that moves: their
  change, largest entry change and spread; dense weights are left out."""
  w = np.ones((2, 3, 4))
  before = {'layers_0/moe/experts/wi_0': w, 'layers_0/moe/router/w': np.zeros((3, 2)),
            'layers_0/mlp/wi_0': np.ones((3, 4))}
  after = {'layers_0/moe/experts/wi_0': w + np.array([0.1, -0.1])[:, None, None],
           'layers_0/moe/router/w': np.full((3, 2), 0.01), 'layers_0/mlp/wi_0': np.ones((3, 4))}
  experts, router = parting.movement(before, after, num_experts=2)
  assert experts['param'] == 'layers_0/moe/experts/wi_0' and router['param'].endswith('router/w')
  assert experts['spread_before'] == 0 and np.isclose(experts['spread_after'], 0.1)
  assert np.isclose(experts['change'], 0.1 * np.sqrt(24)) and np.isclose(router['max_abs_change'], 0.01)
  assert 'spread_after' not in router
  text = parting.summary(dict(before=0, after=40, lr_sum=0.0035, rows=[experts, router]))
  assert "experts' spread 0-0 -> 0.1" in text and text.startswith('steps 0 -> 40')
