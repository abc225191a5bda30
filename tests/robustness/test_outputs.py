"""One rule for what a command writes (moe_jax/containment.py): a new
file unless --overwrite, never anything inside a workdir (config.json,
metrics.jsonl, upcycle_report.json, checkpoints/...: whatever the run wrote,
even with its checkpoints/ deleted) but a new file beside the run it reads,
never an input of the command nor under one such as --data_dir, never two
outputs on one path; and a config.json that is a JSON object of other keys (what an
--out over it used to leave) is refused in one line by every reader."""
import json
import os
import shutil

import pytest

from experiments import report
from tests.robustness import damage, rows
from tests.robustness.rows import param
from tests.robustness.test_read_only_inputs import _DOC, _task_data

_EVAL = '--tasks=arc_easy --data_dir={tmp}/data'
_RESULT_LINE = json.dumps(dict(task='arc_easy', mode='loglik', n=1, accuracy=1.0))


def _both(*setups):
  def setup(p):
    for s in setups:
      s(p)
  return setup


def _table(p):
  damage.write(p['tmp'], 'T.csv', 'N1,D1,loss\n1e8,1e9,3.0\n')


def _upcycle_report(p):
  damage.write(p['copy'], 'upcycle_report.json', json.dumps(dict(step=0)) + '\n')


def _no_checkpoints(p):
  shutil.rmtree(os.path.join(p['copy'], 'checkpoints'))


def _over_config(p):
  damage.write(p['copy'], 'config.json', _RESULT_LINE + '\n')


OUT_ROWS = [
    param(f'eval_out_over_its_{name.replace("/", "_")}', f'--ckpt={{copy}} {_EVAL} '
          f'--out={{copy}}/{name} {flag}', r'lies in the run in .*/copy; write it elsewhere',
          _task_data(**_DOC), module='moe_jax.evaluate')
    for name, flag in (('config.json', ''), ('config.json', '--overwrite'),
                       ('metrics.jsonl', '--overwrite'), ('lineage.json', '--overwrite'),
                       ('checkpoints/2/_CHECKPOINT_METADATA', '--overwrite'),
                       ('tb/new.jsonl', ''))] + [
    param('eval_out_over_another_runs_config', f'--ckpt={{wd}} {_EVAL} '
          '--out={copy}/config.json --overwrite', r'lies in the run in .*/copy',
          _task_data(**_DOC), module='moe_jax.evaluate'),
    param('eval_out_under_data_dir', f'--ckpt={{wd}} {_EVAL} '
          '--out={tmp}/data/oe_eval_tasks/arc_easy/new.jsonl --overwrite',
          r'must lie outside --data_dir \(task data ', _task_data(**_DOC),
          module='moe_jax.evaluate'),
    param('eval_out_an_existing_file', f'--ckpt={{wd}} {_EVAL} --out={{tmp}}/notes.txt',
          r'--out=.*notes.txt exists; pass --overwrite to replace it',
          _both(_task_data(**_DOC), lambda p: damage.write(p['tmp'], 'notes.txt', 'mine')),
          module='moe_jax.evaluate'),
    param('inspect_plot_an_existing_file', '--ckpt={wd} --norms --plot={tmp}/n.png',
          r'--plot=.*n.png exists; pass --overwrite',
          lambda p: damage.write(p['tmp'], 'n.png', 'mine'), module='moe_jax.inspect'),
    param('inspect_plot_into_checkpoints', '--ckpt={wd} --norms --plot={copy}/checkpoints/n.png',
          r'lies in the run in .*/copy', module='moe_jax.inspect'),
    param('collect_out_an_existing_file', 'collect {wd} --out={tmp}/runs.jsonl',
          r'--out=.*runs.jsonl exists; pass --overwrite',
          lambda p: damage.write(p['tmp'], 'runs.jsonl', 'mine'), module='moe_jax.scaling_laws'),
    param('collect_out_over_another_runs_metrics', 'collect {wd} --out={copy}/metrics.jsonl '
          '--overwrite', r'lies in the run in .*/copy', module='moe_jax.scaling_laws'),
    param('export_out_over_another_runs_checkpoints', '--ckpt={wd} --out={copy}/checkpoints '
          '--overwrite', r'--out=.*/checkpoints .* lies in the run in .*/copy',
          module='moe_jax.interop.export_hf'),
    # An input of the command, with or without --overwrite (issue 70, item 1).
    param('fit_out_its_runs_table', 'fit --runs={tmp}/T.csv --out={tmp}/T.csv --overwrite',
          r'--out=.*T.csv .* must lie outside --runs \(runs table ', _table,
          module='moe_jax.scaling_laws'),
    param('fit_plot_its_runs_table', 'fit --runs={tmp}/T.csv --plot={tmp}/T.csv',
          r'--plot=.*T.csv .* must lie outside --runs', _table, module='moe_jax.scaling_laws'),
    param('collect_out_its_workdir', 'collect {copy} --out={copy} --overwrite',
          r'--out=.*copy .* must lie outside a WORKDIR', module='moe_jax.scaling_laws'),
    # Anything a run wrote, not a list of names (item 2).
    param('eval_out_over_another_runs_upcycle_report', f'--ckpt={{wd}} {_EVAL} '
          '--out={copy}/upcycle_report.json --overwrite', r'lies in the run in .*/copy',
          _both(_task_data(**_DOC), _upcycle_report), module='moe_jax.evaluate'),
    param('eval_out_over_its_upcycle_report', f'--ckpt={{copy}} {_EVAL} '
          '--out={copy}/upcycle_report.json --overwrite', r'lies in the run in .*/copy',
          _both(_task_data(**_DOC), _upcycle_report), module='moe_jax.evaluate'),
    param('collect_out_over_a_runs_upcycle_report', 'collect {wd} '
          '--out={copy}/upcycle_report.json --overwrite', r'lies in the run in .*/copy',
          _upcycle_report, module='moe_jax.scaling_laws'),
    param('collect_out_new_file_in_another_run', 'collect {wd} --out={copy}/runs.jsonl',
          r'lies in the run in .*/copy', module='moe_jax.scaling_laws'),
    # A workdir without its checkpoints/ is still one (item 3).
    param('collect_out_over_metrics_of_a_run_without_checkpoints', 'collect {wd} '
          '--out={copy}/metrics.jsonl --overwrite', r'lies in the run in .*/copy',
          _no_checkpoints, module='moe_jax.scaling_laws'),
    # Two outputs on one path (item 4).
    param('fit_out_and_plot_one_path', 'fit --runs={tmp}/T.csv --out={tmp}/X.png '
          '--plot={tmp}/X.png', r'--plot=.*X.png and --out=.*X.png are one path', _table,
          module='moe_jax.scaling_laws'),
    param('fit_out_and_plot_one_path_through_a_link', 'fit --runs={tmp}/T.csv '
          '--out={tmp}/link/X.png --plot={tmp}/X.png', r'are one path',
          _both(_table, lambda p: os.symlink(p['tmp'], os.path.join(p['tmp'], 'link'))),
          module='moe_jax.scaling_laws'),
    # A directory output inside a run (item 5).
    param('gpu_run_out_into_checkpoints', '--call=B --out={copy}/checkpoints/99 --dry_run',
          r'--out=.*checkpoints/99 .* lies in the run in .*/copy', module='experiments.gpu.run'),
    param('gpu_run_out_into_a_run', '--call=B --out={copy}/gpu --dry_run', r'lies in the run in .*/copy',
          module='experiments.gpu.run'),
    param('export_out_into_a_run_without_checkpoints', '--ckpt={wd} --out={copy}/hf',
          r'--out=.*/hf .* lies in the run in .*/copy', _no_checkpoints,
          module='moe_jax.interop.export_hf'),
    param('main_workdir_in_a_runs_checkpoints', '--config={cfg} --workdir={copy}/checkpoints/99',
          r'--workdir=.*checkpoints/99 .* lies in the run in .*/copy', module='moe_jax.main'),
    param('prepare_out_into_a_run', '--progress=false --src={tmp}/a.jsonl --out={copy}/shards',
          r'--out=.*/shards .* lies in the run in .*/copy',
          lambda p: damage.write(p['tmp'], 'a.jsonl', json.dumps(dict(text='a b c')) + '\n'),
          module='moe_jax.data.prepare'),
    param('parting_out_over_its_metrics', '--workdir={copy} --before=1 --out={copy}/metrics.jsonl',
          r'--out=.*metrics.jsonl .* lies in the run in .*/copy',
          module='experiments.moesturizer.parting'),
    param('letter_probe_out_over_its_config', '--ckpt={copy} --out={copy}/config.json',
          r'--out=.*config.json .* lies in the run in .*/copy',
          module='experiments.moesturizer.letter_probe'),
    # config.json overwritten by a JSON object of other keys (a results line).
    param('eval_config_json_of_other_keys', '--ckpt={copy}',
          r"config.json: not a run config \(no key 'seed'; its keys: accuracy, mode, n, task\)",
          _over_config, module='moe_jax.evaluate'),
    param('main_config_json_of_other_keys', '--workdir={copy}', r'config.json: not a run config',
          _over_config, module='moe_jax.main'),
    param('generate_config_json_of_other_keys', '--ckpt={copy} --prompt=a',
          r'config.json: not a run config', _over_config, module='moe_jax.generate'),
    param('config_json_group_not_an_object', '--ckpt={copy}',
          r"config.json: not a run config \(no group 'model'",
          lambda p: damage.edit_json(p['copy'], 'config.json', lambda r: r.update(model=3)),
          module='moe_jax.evaluate'),
    param('collect_config_json_of_other_keys', 'collect {copy}', r'config.json: not a run config',
          _over_config, module='moe_jax.scaling_laws'),
]


@pytest.mark.parametrize('row', OUT_ROWS)
def test_refuses_to_write_over(cli, trained, tmp_path, row):
  rows.check(cli, row.module, row, tmp_path, trained)


def test_eval_out_is_a_new_file_beside_the_run_never_replaced(cli, trained, tmp_path, copy_of):
  copy = copy_of(trained)
  _task_data(**_DOC)(dict(tmp=str(tmp_path)))
  argv = [f'--ckpt={copy}', '--tasks=arc_easy', f'--data_dir={tmp_path}/data',
          f'--out={copy}/benchmarks.0.jsonl']
  first = cli.run('moe_jax.evaluate', *argv, cwd=tmp_path)
  assert first.rc == 0, first.stderr
  with open(os.path.join(copy, 'benchmarks.0.jsonl')) as f:
    assert f.read() == first.stdout
  for flag in ((), ('--overwrite',)):   # once there, it is the run's
    again = cli.run('moe_jax.evaluate', *argv, *flag, cwd=tmp_path)
    assert again.rc == 2 and 'lies in the run in' in again.stderr, again.stderr
  with open(os.path.join(copy, 'benchmarks.0.jsonl')) as f:
    assert f.read() == first.stdout


def test_report_warns_on_a_torn_last_metrics_line(tmp_path, capsys):
  path = tmp_path / 'metrics.jsonl'
  path.write_text(json.dumps(dict(step=1, loss=3.0)) + '\n{"step": 2, "lo')
  assert report._metrics(str(path)) == [dict(step=1, loss=3.0)]  # pylint: disable=protected-access
  err = capsys.readouterr().err
  assert err.startswith('warning: ') and 'line 2 is torn' in err and err.count('\n') == 1
  path.write_text(json.dumps(dict(step=1, loss=3.0)) + '\n')
  report._metrics(str(path))  # pylint: disable=protected-access
  assert capsys.readouterr().err == ''
