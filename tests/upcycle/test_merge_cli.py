"""`python -m moe_jax.upcycle --config=configs/upcycle/merge.py --src=A,B` end
to end on tiny dense checkpoints: the report per source, lineage with every
parent, sources untouched, the merged workdir trains on; bad inputs are
one-line errors that write nothing."""
import json
import os
import subprocess
import sys

import pytest

from configs.upcycle import merge
from moe_jax.errors import ConfigError
from moe_jax.train import trainer
from moe_jax.upcycle import run
from moe_jax.workdir import lineage
from tests.train import tiny
from tests.upcycle.test_cli import _digest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def sources(tmp_path_factory):
  """Two tiny dense models from one seed, each trained 2 steps on its own
  stream (another data seed); and a copy of the first whose config.json
  claims a wider MLP."""
  root = tmp_path_factory.mktemp('sources')
  out = []
  for name, overrides in (('a', {}), ('b', {'seed': 1})):
    workdir = str(root / name)
    trainer.train_and_evaluate(tiny.config(**{'moe.num_experts': 0, 'total_steps': 2,
                                              **overrides}), workdir)
    out.append(workdir)
  wide = root / 'wide'
  subprocess.run(['cp', '-r', out[0], str(wide)], check=True)
  config = json.loads((wide / 'config.json').read_text())
  config['model']['d_ff'] = 96
  (wide / 'config.json').write_text(json.dumps(config))
  eps = root / 'eps'   # same shapes, another architecture
  subprocess.run(['cp', '-r', out[0], str(eps)], check=True)
  config = json.loads((eps / 'config.json').read_text())
  config['model']['norm_eps'] = 0.5
  (eps / 'config.json').write_text(json.dumps(config))
  return out + [str(wide), str(eps)]


def _cli(*args):
  return subprocess.run([sys.executable, '-m', 'moe_jax.upcycle', *args], cwd=_REPO,
                        env=dict(os.environ, PYTHONPATH=_REPO), capture_output=True, text=True,
                        check=False)


def test_merge_cli_reports_each_source_and_records_every_parent(sources, tmp_path):
  a, b, _, _ = sources
  before = [_digest(a), _digest(b)]
  dst = str(tmp_path / 'merged')
  proc = _cli('--config=configs/upcycle/merge.py:per_source=2,top_k=2,router=domain,steps=20,'
              'batches=1', f'--src={a},{b}', f'--dst={dst}')
  assert proc.returncode == 0, proc.stderr
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  assert [_digest(a), _digest(b)] == before
  assert [os.path.dirname(os.path.dirname(r['source'])) for r in report['sources']] == [a, b]
  for r in report['sources']:
    assert r['tokens'] > 0 and 0.0 <= r['own_share'] <= 1.0
    assert r['loss_after'] > 0 and r['loss_before'] > 0
  config = json.loads(open(os.path.join(dst, 'config.json')).read())
  assert (config['moe']['num_experts'], config['moe']['top_k']) == (4, 2)
  record = lineage.read(dst)
  origin = record['stages'][-1]['origin']
  assert origin['recipe'] == 'merge' and origin['args']['num_sources'] == 2
  assert [p['checkpoint'] for p in origin['parents']] == [r['source'] for r in report['sources']]
  assert origin['parent_lineages'][0]['stages'][-1]['workdir'] == b
  assert record['stages'][0]['workdir'] == a and lineage.check(record, dst) == []
  # The merged workdir trains on with an MoE config of its shape.
  trainer.train_and_evaluate(tiny.config(**{'moe.num_experts': 4, 'moe.top_k': 2,
                                            'total_steps': 1, 'eval_every_steps': 1}), dst)
  assert os.path.isdir(os.path.join(dst, 'checkpoints', '1'))


def test_shared_from_one_source_keeps_it_exact_on_its_data_with_one_expert_each(sources,
                                                                              tmp_path):
  # The experts of source 0 are its MLP and shared=0 gives its other params; a
  # random router still sends some tokens to source 1's expert, so only
  # the routing share says how far from exact the merge is. With top_k=2 of
  # 2 experts both are always used: the report must show a loss change.
  a, b, _, _ = sources
  report = run.upcycle_checkpoint(merge.get_config('shared=0'), [a, b],
                                       str(tmp_path / 'm'))
  first = report['sources'][0]
  assert first['loss_after'] != first['loss_before']
  assert report['recipe']['args']['shared'] == 0


@pytest.mark.parametrize('srcs, message', [
    (lambda s: [s[0]], 'at least 2'),
    (lambda s: [s[0], s[2]], r"--src 1 \(.*\) does not share the architecture of --src 0: "
                             r"param layers_0/mlp/wi_0 has shape \(32, 96\) there, \(32, 64\)"),
    (lambda s: [s[0], s[1], s[3]], r'--src 2 \(.*\) does not share the architecture of --src 0: '
                                   r'model.norm_eps=0.5 there, 1e-0?6 in --src 0'),
    (lambda s: [s[0], s[0] + '_missing'], 'does not exist|no checkpoint'),
])
def test_bad_sources_are_one_line_errors_and_write_nothing(sources, tmp_path, srcs, message):
  with pytest.raises(ConfigError, match=message):
    run.upcycle_checkpoint(merge.get_config(), srcs(sources), str(tmp_path / 'x'))
  assert os.listdir(tmp_path) == []


def test_cli_bad_inputs_exit_2_with_one_line(sources, tmp_path):
  a, b, wide, _ = sources
  for args, message in (
      ([f'--src={a},{wide}'], 'does not share the architecture'),
      ([f'--src={a},{b}', '--config.args.router=learned'], "router='learned'"),
      ([f'--src={a},{b}', '--config.args.shared=7'], "shared=7 is not 'mean'"),
  ):
    proc = _cli('--config=configs/upcycle/merge.py', f'--dst={tmp_path / "x"}', *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith('error: ') and message in lines[-1], proc.stderr
  proc = _cli('--config=configs/upcycle/merge.py', f'--src={a},{b}', f'--dst={a}/inside')
  assert proc.returncode == 2 and 'must lie outside --src' in proc.stderr
  assert os.listdir(tmp_path) == []
