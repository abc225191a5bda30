"""The planner at the seeds' own settings, where its answers must be theirs:
seed 000's 7B -> 13B expert upcycling (costs of eqs. 1-2, CPT >= 50%, tau ~
2/3 T) and seed 002's D* regime (upcycling beats a MoE from scratch below D*,
loses above). Workdirs here are synthetic: run.json, lineage.json and
metrics.jsonl as the trainer writes them, for models far too large to train;
a trained checkpoint is planned in tests/workdir/test_lineage_chain.py."""
import json
import os

import pytest

from configs import lm_dense, lm_moe
from moe_jax import plan as plan_cli
from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import __main__ as laws_cli
from moe_jax.scaling_laws import dstar, laws, plan, presets
from moe_jax.workdir import files, lineage, run_record
from tests import flag_main
from tests.scaling_laws import synthetic

S0 = 378_000                   # seed 000: 32 experts pre-trained for tau = 2/3 T steps
TPS = 256 * 4096               # ~1M tokens per step: 380B tokens at S0


def _workdir(root, config, step, seconds, devices, record=True):
  """A workdir at `step` whose metrics log `seconds` per step."""
  workdir = str(root)
  os.makedirs(os.path.join(workdir, 'checkpoints', str(step)))
  files.write_config(workdir, config)
  run = run_record.build(config, devices=devices)
  files.write_json(os.path.join(workdir, files.RUN), run)
  if record:
    lineage.write(workdir, lineage.begin(lineage.stage(
        workdir, 0, run['tokens_per_step'], run['model'], lineage.origin('scratch', seed=0))))
  with open(os.path.join(workdir, 'metrics.jsonl'), 'w') as f:
    for s in (1000, 2000, 3000):   # the first interval pays for compilation
      rate = run['tokens_per_step'] / (seconds * (5 if s == 1000 else 1))
      f.write(json.dumps(dict(step=s, loss=2.0, tokens_per_s=rate)) + '\n')
  return workdir


@pytest.fixture
def seed000(tmp_path):
  config = lm_moe.get_config('20layer')
  config.update(batch_size=256, seq_len=4096)
  return _workdir(tmp_path / 'moe32', config, S0, seconds=2.1, devices=64)


def _plan(capsys, *argv):
  assert flag_main.call(plan_cli, [*argv, '--json']) == 0, capsys.readouterr().err
  out = json.loads(capsys.readouterr().out)
  return out, {o['name']: o for o in out['options']}


def test_seed000_7b_to_13b_at_50_percent_cpt(seed000, capsys):
  """Seed 000 sec. 3.1 / Fig. 2: 32 -> 64 experts with 50% CPT, 2.1 s and
  4.1 s per step on 64 GPUs: 13,776 GPU hours of CPT; Fixed-64 from scratch
  41,328, in-run upcycling 27,888 (32% saved), 67% saved with the 32-expert
  checkpoint sunk."""
  out, options = _plan(capsys, f'--ckpt={seed000}', '--budget=13776gpuh', '--factors=2',
                       '--step_time=expert_x2=4.1')
  source, x2 = out['source'], options['expert_x2']
  assert source['tokens'] == S0 * TPS and source['seconds_per_step'] == pytest.approx(2.1)
  assert (source['model']['params'], x2['model']['params']) == (7_638_567_232, 13_679_020_672)
  assert x2['steps'] == pytest.approx(S0 / 2) and x2['tau_now']
  assert (x2['cpt_fraction'], x2['eta']) == (pytest.approx(0.5), pytest.approx(0.843))
  cost = x2['eqs_1_2']
  assert (cost['C_fs'], cost['C_up'], cost['C_up_sunk']) == (
      pytest.approx(41_328), pytest.approx(27_888), pytest.approx(13_776))
  assert cost['saving_fraction'] == pytest.approx(0.325, abs=1e-3)
  assert cost['sunk_saving_fraction'] == pytest.approx(2 / 3)
  assert out['recommendation'] == 'expert_x2'
  # Keep training buys 4.1 / 2.1 more tokens; the scratch run as many as upcycling.
  assert options['keep']['tokens'] == pytest.approx(x2['tokens'] * 4.1 / 2.1)
  assert options['scratch_64x']['tokens'] == pytest.approx(x2['tokens'])
  # The same budget in tokens plans the same.
  out, options = _plan(capsys, f'--ckpt={seed000}', f'--budget={S0 * TPS / 2}tokens',
                       '--factors=2', '--step_time=expert_x2=4.1')
  assert options['expert_x2']['steps'] == pytest.approx(S0 / 2)
  assert out['recommendation'] == 'expert_x2'


def test_seed000_recipe_sets_tau_and_refuses_short_cpt(seed000, capsys):
  # A budget as large as pre-training: train 32 experts on, then upcycle at
  # tau = 2/3 T (sec. 3.1), keeping CPT at 50% of the tokens before tau.
  _, options = _plan(capsys, f'--ckpt={seed000}', f'--budget={S0 * TPS}tokens')
  x2 = options['expert_x2']
  total = x2['tau_step'] + x2['cpt'] / TPS
  assert x2['tau_step'] / total == pytest.approx(2 / 3) and not x2['tau_now']
  # 10% CPT: Table 3(b)'s eta is 35% there; the recipe says keep training.
  out, options = _plan(capsys, f'--ckpt={seed000}', f'--budget={0.1 * S0 * TPS}tokens')
  assert options['expert_x2']['eta'] == pytest.approx(0.347)
  assert out['recommendation'] == 'keep' and 'below 50%' in out['reason']


def _dense_1b():
  config = lm_dense.get_config('dense_1b')
  moe = lm_moe.get_config('8x1b')
  return run_record.summary(config), run_record.summary(moe)


@pytest.mark.parametrize('budget_over_dstar, winner', [(0.3, 'sparse_8x'), (1.0, None),
                                                       (3.0, 'scratch_8x')])
def test_seed002_dstar_regime(budget_over_dstar, winner):
  """Seed 002 sec. 5.1: a dense model trained on D* tokens, upcycled for D2
  more, beats a MoE from scratch on D2 below D* and loses above (eq. 13)."""
  dense, moe = _dense_1b()
  n1 = dense['dense_nonembed']
  d_star = dstar.solve(presets.PRESETS['table2_moe']['params'],
                       presets.PRESETS['table2_upcycled']['params'], n1)[0]
  # Measured where seed 002's dense law puts it: the law is calibrated here.
  at_source = laws.default()['dense'].predict({'N1': n1, 'D1': d_star})[0]
  source = dict(workdir='w', step=1000, model=dense, tokens=d_star, tokens_per_step=1e6,
                val_loss=at_source + 0.01)
  result = plan.plan(source, [dict(name='sparse_8x', how='sparse', model=moe)],
                     plan.Budget(budget_over_dstar * d_star, 'tokens'), laws.default())
  options = {o['name']: o for o in result['options']}
  up, scratch = options['sparse_8x'], options['scratch_8x']
  assert up['crossing'] == pytest.approx(d_star, rel=1e-6)   # eq. 13 at D1 = D* is D*
  if winner is None:
    assert up['loss'] == pytest.approx(scratch['loss'], abs=1e-9)
    assert 'tie within' in result['reason']
  else:
    loser = scratch if winner == 'sparse_8x' else up
    assert options[winner]['loss'] < loser['loss']
  if budget_over_dstar == 3.0:   # outside the upcycled law's uncertainty, no other option wins
    assert result['recommendation'] == 'scratch_8x' and 'lowest predicted' in result['reason']


def test_a_fitted_law_gives_intervals_and_its_domain(tmp_path, capsys):
  synthetic.write_upcycled_table(str(tmp_path / 'runs.jsonl'))
  assert laws_cli.main(['fit', f'--runs={tmp_path}/runs.jsonl', '--form=joint',
                        '--kind=upcycled', '--fix=E=0.165', '--max_inits=4', '--bootstrap=8',
                        f'--out={tmp_path}/fit.json']) == 0
  capsys.readouterr()
  law = laws.load(str(tmp_path / 'fit.json'))['upcycled']
  assert law.domain['N1'] == (1e7, 1e9) and law.domain['source_experts'] == [0]
  loss, lo, hi = law.predict({'N1': 1e8, 'D1': 1e10, 'D2': 1e10})
  assert lo < loss < hi and hi - lo < 0.05
  assert law.flags({'N1': 1e8, 'D1': 1e10, 'D2': 1e10}) == []
  (far, text), = law.flags({'N1': 2e10, 'D1': 1e10, 'D2': 1e10})
  assert far and text.startswith('N1=2e+10 is 20x above')


@pytest.mark.parametrize('args, message', [
    ('--budget=0tokens', "--budget='0tokens' must be > 0"),
    ('--budget=-3gpuh', "--budget='-3gpuh' must be > 0"),
    ('--budget=5', 'expected a number and a unit'),
    ('--budget=1e9tokens --law={tmp}/shape.json', 'expected "fits"'),
    ('--budget=1e9tokens --law={tmp}/config.json', "form 'config' has no token dependence"),
    ('--budget=1e9tokens --law={tmp}/no_kind.json', 'must say its kind'),
    ('--budget=1e9tokens --law={tmp}/listed.json', 'expected "fits", a list of objects'),
    ('--budget=1e9tokens --law={tmp}/nan.json', "parameter 'E' of form 'chinchilla' is missing"),
    ('--budget=1e9tokens --factors=1', "--factors='1': expected comma-separated integers"),
    ('--budget=1e9tokens --step_time=expert_x9=2', "--step_time='expert_x9=2'"),
    ('--budget=1e9tokens --devices=0', '--devices=0 must be > 0'),
    ('--budget=1e9tokens --measured={tmp}/dense', 'is none of the options'),
    ('--budget=1e9tokens --ckpt={tmp}/no_run', 'run.json is missing'),
    ('--budget=1e9tokens --ckpt={tmp}/imported', 'pass --tokens'),
])
def test_bad_inputs_are_one_line_errors(seed000, tmp_path, capsys, args, message):
  for name, record in dict(shape={'x': 1}, config={'fits': [dict(form='config', params=dict(
      A=1, beta1=1, F=1, beta2=1, E=1))]}, no_kind={'fits': [dict(
          form='chinchilla', params=dict(A=1, B=1, alpha=1, beta=1, E=1))]}, listed={'fits': [1]},
      nan={'kind': 'dense', 'fits': [dict(form='chinchilla', params=dict(
          A=1, B=1, alpha=1, beta=1, E='nan'))]}).items():
    files.write_json(str(tmp_path / f'{name}.json'), record)
  dense = lm_dense.get_config('dense_15m')
  _workdir(tmp_path / 'dense', dense, 5000, 1.0, 1)
  os.makedirs(tmp_path / 'no_run' / 'checkpoints' / '5')
  imported = _workdir(tmp_path / 'imported', dense, 0, 1.0, 1, record=False)
  lineage.write(imported, lineage.record_import(imported, run_record.summary(dense),
                                                'hub/model'))   # tokens unknown
  argv = args.format(tmp=tmp_path).split()
  if not any(a.startswith('--ckpt') for a in argv):
    argv.append(f'--ckpt={seed000}')
  assert flag_main.call(plan_cli, argv) == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and err.startswith('error: ') and message in err, err


def test_a_device_hour_budget_needs_step_times(tmp_path):
  dense, moe = _dense_1b()
  source = dict(workdir='w', step=10, model=dense, tokens=1e9, tokens_per_step=1e6,
                seconds_per_step=None)
  with pytest.raises(ConfigError, match='needs seconds per step: none measured for keep'):
    plan.plan(source, [dict(name='sparse_8x', how='sparse', model=moe)],
              plan.parse_budget('10gpuh'), laws.default())


def test_a_law_of_expert_upcycled_runs_predicts_expert_upcycling(seed000, tmp_path, capsys):
  """A joint law fitted on E -> mE runs (source_experts > 0) replaces seed
  000's recipe: expert_x2 gets a loss, and the law recommends."""
  upcycled = dict(form='joint', params=synthetic.table2('table2_upcycled'), domain=dict(
      N1=[1e8, 2e9], D1=[1e10, 1e12], D2=[1e10, 1e12], n_expert=[64], top_k=[2],
      source_experts=[32]), loo_rms=0.01)
  both = dict(form='chinchilla_joint', params=dict(
      A_dense=8.83, B_dense=12.3, alpha_dense=0.088, beta_dense=0.116, A_moe=32.0, B_moe=7.05,
      alpha_moe=0.161, beta_moe=0.08, E=0.165), domain=dict(N1=[1e8, 2e9], D1=[1e10, 1e12]))
  files.write_json(str(tmp_path / 'fit.json'), dict(kind='upcycled', fits=[upcycled],
                                                    joint_e_fit=both))
  loaded = laws.load(str(tmp_path / 'fit.json'))
  assert sorted(loaded) == ['dense', 'moe', 'upcycled']
  assert loaded['moe'].params == presets.PRESETS['table2_moe']['params']
  out, options = _plan(capsys, f'--ckpt={seed000}', f'--budget={S0 * TPS / 2}tokens',
                       f'--law={tmp_path}/fit.json', '--factors=2')
  x2 = options['expert_x2']
  # The source has no val_loss: the law cannot be checked, so no loss is printed.
  assert x2['loss'] is None and out['calibration']['status'] == 'withheld'
  # Measured where the law puts it, the law is calibrated and predicts.
  source = out['source']
  at_source = loaded['moe'].predict({'N1': source['model']['dense_nonembed'],
                                     'D1': source['tokens']})[0]
  with open(os.path.join(seed000, 'metrics.jsonl'), 'a') as f:
    f.write(json.dumps(dict(step=S0, loss=at_source, val_loss=at_source - 0.02)) + '\n')
  out, options = _plan(capsys, f'--ckpt={seed000}', f'--budget={S0 * TPS / 2}tokens',
                       f'--law={tmp_path}/fit.json', '--factors=2')
  x2 = options['expert_x2']
  assert out['calibration']['status'] == 'calibrated'
  assert x2['loss'] is not None and x2['hi'] - x2['lo'] == pytest.approx(0.02)
  assert x2['flags'] == [] and 'seed 000 recipe' not in out['reason']


def _seed002_dense_source(val_loss):
  dense, moe = _dense_1b()
  source = dict(workdir='w', step=1000, model=dense, tokens=2e10, tokens_per_step=1e6,
                val_loss=val_loss, val_step=1000)
  return plan.plan(source, [dict(name='sparse_8x', how='sparse', model=moe)],
                   plan.Budget(1e10, 'tokens'), laws.default())


def test_a_law_that_misses_the_sources_own_loss_prints_no_loss():
  """The issue's case: seed 002's law says 4.77 nats for a model at 1.95
  (another corpus and tokenizer): no option gets a loss, and the plan says why."""
  dense, _ = _dense_1b()
  at_source = laws.default()['dense'].predict({'N1': dense['dense_nonembed'], 'D1': 2e10})[0]
  result = _seed002_dense_source(at_source - 1.0)
  assert [o['loss'] for o in result['options']] == [None] * len(result['options'])
  assert result['calibration']['status'] == 'withheld' and result['recommendation'] is None
  assert result['reason'].startswith(f'loss predictions withheld: seed 002 Table 2 '
                                     f'(table2_dense) predicts {at_source:.4f} nats at the '
                                     f'source, which measured {at_source - 1.0:.4f}')
  assert result['options'][1]['crossing'] is None   # D* comes from the same law
  text = plan.table(result)
  assert 'losses  withheld: ' in text and 'other units or fitted to other data' in text
  # Unmeasured: withheld too, saying so.
  result = _seed002_dense_source(None)
  assert result['options'][0]['loss'] is None
  assert 'logged no val_loss' in result['calibration']['text']
  # Within the tolerance: calibrated, and the losses are the law's.
  result = _seed002_dense_source(at_source + plan.CALIBRATION_NATS / 2)
  assert result['calibration']['status'] == 'calibrated'
  assert result['options'][0]['loss'] == laws.default()['dense'].predict(
      {'N1': dense['dense_nonembed'], 'D1': 3e10})[0]
