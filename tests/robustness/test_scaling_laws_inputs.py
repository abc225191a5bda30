"""`python -m moe_jax.scaling_laws` over bad inputs: tables that do not read,
numbers that are not finite or out of range, unknown names, outputs that
cannot be written. Each exits 2 with one `error:` line and writes nothing."""
import json
import os

import pytest

from tests.robustness import damage, rows
from tests.robustness.rows import param

CSV = 'kind,N1,D1,D2,loss\nupcycled,1e8,1e9,1e9,3.1\nupcycled,1e9,1e9,1e9,2.9\n'
FIT = json.dumps({'fits': [{'form': 'joint', 'params': {'E': 1.0}}]})


def _file(relpath, data):
  return lambda p: damage.write(p['tmp'], relpath, data)


def _workdir(run=None, metrics=None, lineage=None):
  def setup(p):
    for name, data in (('run.json', run), ('metrics.jsonl', metrics), ('lineage.json', lineage)):
      if data is not None:
        damage.write(p['tmp'], f'w/{name}', data)
  return setup


_MODEL = dict(num_experts=0, top_k=0, dense_nonembed=10, nonembed=10, nonembed_active=10)
FINISHED = ('{"total_steps": 1, "tokens_per_step": 1}', '{"step": 1, "val_loss": 2.0}\n')


ROWS = [
    param('no_command', '', r'the following arguments are required: command'),
    param('unknown_command', 'plot', r"invalid choice: 'plot'"),
    # Runs tables.
    param('runs_missing', 'fit --runs={tmp}/none.csv', r'runs table .*none.csv: no such file'),
    param('runs_not_utf8', 'fit --runs={tmp}/r.csv', r'r.csv: not UTF-8',
          _file('r.csv', b'kind,loss\nmo\xe9,1\n')),
    param('runs_ragged_extra_field', 'fit --runs={tmp}/r.csv', r'line 3 has 6 fields, the header 5',
          _file('r.csv', CSV.replace('2.9', '2.9,7'))),
    param('runs_ragged_missing_field', 'fit --runs={tmp}/r.csv', r'line 2 has 4 fields',
          _file('r.csv', CSV.replace(',3.1', ''))),
    param('runs_jsonl_not_objects', 'fit --runs={tmp}/r.jsonl',
          r'line 2 is a JSON list, not an object', _file('r.jsonl', '{"loss": 1}\n[1, 2]\n')),
    param('runs_jsonl_not_json', 'fit --runs={tmp}/r.jsonl', r'line 1 is not JSON',
          _file('r.jsonl', 'loss=1\n')),
    param('runs_empty', 'fit --runs={tmp}/r.jsonl', r'no rows', _file('r.jsonl', '')),
    param('runs_kind_unknown', 'fit --runs={tmp}/r.csv', r"kind 'sparse' is not one of",
          _file('r.csv', CSV.replace('upcycled,1e8', 'sparse,1e8'))),
    param('runs_nan_loss', 'fit --runs={tmp}/r.csv --kind=upcycled',
          r"column 'loss' must be finite and > 0", _file('r.csv', CSV.replace('3.1', 'nan'))),
    param('runs_duplicate_column', 'fit --runs={tmp}/r.csv',
          r"column 'loss' appears more than once in the header",
          _file('r.csv', CSV.replace('D2,loss', 'loss,loss'))),
    param('runs_loss_1e308', 'fit --runs={tmp}/r.csv --kind=upcycled',
          r'loss 1e\+308 \(row 0\) is no cross-entropy in nats',
          _file('r.csv', CSV.replace('3.1', '1e308'))),
    # fit flags.
    param('form_unknown', 'fit --runs={tmp}/r.csv --form=quadratic',
          r"form 'quadratic' is not one of",
          _file('r.csv', CSV)),
    param('kind_unknown', 'fit --runs={tmp}/r.csv --kind=sparse',
          r"argument --kind: invalid choice"),
    param('bootstrap_negative', 'fit --runs={tmp}/r.csv --bootstrap=-1',
          r"argument --bootstrap: '-1' must be >= 0"),
    param('bootstrap_not_int', 'fit --runs={tmp}/r.csv --bootstrap=2.5',
          r"argument --bootstrap: '2.5' is not an integer"),
    param('max_inits_zero', 'fit --runs={tmp}/r.csv --max_inits=0',
          r"--max_inits: '0' must be >= 1"),
    param('seed_negative', 'fit --runs={tmp}/r.csv --seed=-3', r"--seed: '-3' must be >= 0"),
    param('fix_unknown_parameter', 'fit --runs={tmp}/r.csv --form=joint --fix=Q=1',
          r"--fix Q: not a parameter of form 'joint'", _file('r.csv', CSV)),
    param('fix_not_a_number', 'fit --runs={tmp}/r.csv --fix=E=abc',
          r"--fix: E: 'abc' is not a number",
          _file('r.csv', CSV)),
    param('fix_inf', 'fit --runs={tmp}/r.csv --fix=E=inf',
          r"--fix: E: 'inf' is not a finite number",
          _file('r.csv', CSV)),
    param('fix_without_value', 'fit --runs={tmp}/r.csv --fix=E', r"--fix: expected NAME=NUMBER",
          _file('r.csv', CSV)),
    param('out_directory_missing', 'fit --runs={tmp}/r.csv --out={tmp}/no/fit.json',
          r'--out=.*no/fit.json: directory .*/no does not exist', _file('r.csv', CSV)),
    param('out_is_a_directory', 'fit --runs={tmp}/r.csv --out={tmp}/d',
          r'--out=.* is not a file path',
          lambda p: (_file('r.csv', CSV)(p), os.mkdir(os.path.join(p['tmp'], 'd')))),
    param('out_is_the_directory_of_runs', 'fit --runs={tmp}/r.csv --out={tmp}',
          r'--out=.* must lie outside --runs', _file('r.csv', CSV)),
    param('plot_format_unknown', 'fit --runs={tmp}/r.csv --plot={tmp}/p.gif',
          r"\.gif is not one of the formats", _file('r.csv', CSV)),
    # predict.
    param('predict_nothing', 'predict --params=table2_upcycled', r'predict needs --runs or'),
    param('at_nan', 'predict --params=table2_upcycled --at=D1=nan,D2=1e9,N1=1e9',
          r"--at: D1: 'nan' is not a finite number"),
    param('at_inf', 'predict --params=table2_upcycled --at=D1=1e9,D2=inf,N1=1e9',
          r"--at: D2: 'inf' is not a finite number"),
    param('at_empty_value', 'predict --params=table2_upcycled --at=D1=,D2=1e9,N1=1e9',
          r"--at: D1: '' is not a number"),
    param('at_negative', 'predict --params=table2_upcycled --at=D1=-1e9,D2=1e9,N1=1e9',
          r"column 'D1' must be finite and > 0"),
    param('at_key_twice', 'predict --params=table2_upcycled --at=D1=1e9,D1=2e9,D2=1e9,N1=1e9',
          r'--at: D1 is given twice'),
    param('at_missing_column', 'predict --params=table2_upcycled --at=D1=1e9,N1=1e9',
          r"column 'D2' must be finite and > 0"),
    param('params_unknown', 'predict --params=table9 --at=D1=1,D2=1,N1=1',
          r"--params 'table9' is neither a preset"),
    param('params_file_not_json', 'predict --params={tmp}/f.json --at=D1=1,D2=1,N1=1',
          r'f.json: not JSON', _file('f.json', '{')),
    param('params_file_not_utf8', 'predict --params={tmp}/f.json --at=D1=1,D2=1,N1=1',
          r'f.json: cannot read', _file('f.json', b'{"\xff": 1}')),
    param('params_file_a_list', 'predict --params={tmp}/f.json --at=D1=1,D2=1,N1=1',
          r'f.json: expected a JSON object', _file('f.json', '[]')),
    param('params_file_without_params', 'predict --params={tmp}/f.json --at=D1=1,D2=1,N1=1',
          r'f.json: expected one fit with form and params', _file('f.json', '{"form": "joint"}')),
    param('params_file_missing_a_parameter', 'predict --params={tmp}/f.json --at=D1=1,D2=1,N1=1',
          r"f.json: parameter '.*' of form 'joint' is missing or not a finite number",
          _file('f.json', FIT)),
    # dstar.
    param('n1_empty', 'dstar --n1=', r"--n1: expected comma-separated numbers, got ''"),
    param('n1_empty_item', 'dstar --n1=1e9,,3e9', r"--n1: expected comma-separated numbers, "
          r"got '1e9,,3e9'"),
    param('n1_trailing_comma', 'dstar --n1=1e9,', r'--n1: expected comma-separated numbers'),
    param('n1_inf', 'dstar --n1=1e9,inf', r"--n1: 'inf' is not a finite number"),
    param('n1_nan', 'dstar --n1=nan', r"--n1: 'nan' is not a finite number"),
    param('n1_negative', 'dstar --n1=-1e9', r"--n1: '-1e9' must be > 0"),
    param('n1_words', 'dstar --n1=big', r"--n1: 'big' is not a number"),
    param('lo_above_hi', 'dstar --lo=1e10 --hi=1e6', r'--lo=1e\+10 must be below --hi=1e\+06'),
    param('hi_inf', 'dstar --hi=inf', r"--hi: 'inf' is not a finite number"),
    param('plot_directory_missing', 'dstar --plot={tmp}/no/d.png',
          r'--plot=.*: directory .* does not exist'),
    param('moe_law_of_wrong_form', 'dstar --moe=table2_upcycled',
          r'D\* needs a chinchilla MoE law'),
    # optimal.
    param('d1_nan', 'optimal --d1=nan --c2=1e23', r"--d1: 'nan' is not a finite number"),
    param('c2_inf', 'optimal --d1=1e12 --c2=inf', r"--c2: 'inf' is not a finite number"),
    param('d1_negative', 'optimal --d1=-5 --c2=1e23', r"--d1: '-5' must be > 0"),
    param('c2_empty', 'optimal --d1=1e12 --c2=', r"--c2: '' is not a number"),
    param('n2_over_n1_zero', 'optimal --d1=1e12 --c2=1e23 --n2_over_n1=0', r"must be > 0"),
    param('optimal_needs_joint', 'optimal --params=table2_moe --d1=1 --c2=1', r'needs a joint'),
    # cost.
    param('t_zero', 'cost --s_E=1 --s_mE=2 --T=0 --tau=0', r"--T: '0' must be > 0"),
    param('tau_fraction_above_one', 'cost --s_E=1 --s_mE=2 --T=10 --tau_fraction=1.5',
          r"--tau_fraction: '1.5' must be <= 1"),
    param('tau_past_t', 'cost --s_E=1 --s_mE=2 --T=10 --tau=20', r'tau=20 exceeds --T=10'),
    param('s_e_nan', 'cost --s_E=nan --s_mE=2 --T=10 --tau=5', r"--s_E: 'nan' is not a finite"),
    param('devices_zero', 'cost --s_E=1 --s_mE=2 --T=10 --tau=5 --devices=0',
          r"--devices: '0' must be > 0"),
    param('tau_missing', 'cost --s_E=1 --s_mE=2 --T=10', r'cost needs --tau or --tau_fraction'),
    param('eta_partial', 'cost --s_E=1 --s_mE=2 --T=10 --tau=5 --loss_fixed_E=1.3',
          r'eta needs --loss_fixed_E, --loss_upcycled and --loss_fixed_mE'),
    param('loss_negative', 'cost --s_E=1 --s_mE=2 --T=10 --tau=5 --loss_fixed_E=-1',
          r"--loss_fixed_E: '-1' must be > 0"),
    # collect.
    param('collect_missing_workdir', 'collect {tmp}/none', r'/none: no run.json'),
    param('collect_out_inside_a_workdir', 'collect {tmp}/w --out={tmp}/w/runs.jsonl',
          r'--out=.*runs.jsonl .* must lie outside a WORKDIR \(workdir .*/w\)',
          _workdir(*FINISHED)),
    param('collect_run_json_malformed', 'collect {tmp}/w', r'run.json: not JSON', _workdir('{')),
    param('collect_run_json_not_utf8', 'collect {tmp}/w', r'run.json: cannot read',
          _workdir(b'{"a": "\xff"}')),
    param('collect_run_json_a_list', 'collect {tmp}/w', r'run.json: expected a JSON object',
          _workdir('[]')),
    param('collect_run_json_missing_field', 'collect {tmp}/w', r"missing field 'total_steps'",
          _workdir('{}', '{"step": 1, "val_loss": 2.0}\n')),
    param('collect_metrics_line_a_list', 'collect {tmp}/w', r'line 2 is not a JSON object',
          _workdir('{"total_steps": 1, "tokens_per_step": 1}', '{"step": 1}\n[1]\n')),
    param('collect_metrics_val_loss_text', 'collect {tmp}/w',
          r'line 1: step and val_loss must be numbers',
          _workdir('{"total_steps": 1, "tokens_per_step": 1}', '{"step": 1, "val_loss": "low"}\n')),
    param('collect_val_loss_nan', 'collect {tmp}/w', r'loss=nan must be a finite number >= 0',
          _workdir(json.dumps(dict(total_steps=1, tokens_per_step=1, model=_MODEL)),
                   '{"step": 1, "val_loss": NaN}\n')),
    param('collect_lineage_json_malformed', 'collect {tmp}/w', r'lineage.json: not JSON',
          _workdir(*FINISHED, '{')),
    param('collect_lineage_stages_not_a_list', 'collect {tmp}/w',
          r'lineage.json: "stages" is not a non-empty list',
          _workdir(*FINISHED, '{"stages": {"a": 1}}')),
    param('collect_lineage_stage_without_tokens', 'collect {tmp}/w',
          r"lineage.json \(last stage\): missing field 'tokens_before'",
          _workdir(*FINISHED, '{"stages": [{"start_step": 0, "tokens_per_step": 1}]}')),
    param('collect_out_directory_missing', 'collect {tmp}/w --out={tmp}/no/r.jsonl',
          r'--out=.*: directory .* does not exist'),
]


@pytest.mark.parametrize('row', ROWS)
def test_scaling_laws_refuses_bad_input(cli, tmp_path, row):
  rows.check(cli, 'moe_jax.scaling_laws', row, tmp_path, trained=str(tmp_path))
