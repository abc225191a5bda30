"""Bad input to the launcher: one line naming the problem, exit 2, nothing written."""
import os
import subprocess
import sys

import pytest

from experiments import launch, sweep
from moe_jax.errors import ConfigError

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CONFIG = '''
from configs import lm_moe
def get_config(arg=None):
  config = lm_moe.get_config('tiny')
  config.update(total_steps=4, checkpoint_every_steps=2)
  return config
'''


def _sweep_file(tmp_path, hyper_body):
  path = tmp_path / 'sweep.py'
  path.write_text(_CONFIG + 'def get_hyper(h):\n  return ' + hyper_body + '\n')
  return str(path)


def cli(*args, env=None):
  env = dict(os.environ if env is None else env, PYTHONPATH=_REPO)
  return subprocess.run([sys.executable, '-m', 'experiments.launch', *args], cwd=_REPO, env=env,
                        capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.parametrize('hyper_body, message', [
    ("h.sweep('config.moe.num_expert', [4])", "sweep key 'config.moe.num_expert' is not a config"),
    ("h.sweep('config.model.d_ff.x', [4])", "sweep key 'config.model.d_ff.x' is not a config"),
    ("h.sweep('config.moe.num_experts', ['4'])",
     "sweep value config.moe.num_experts='4' is a str; the config holds a int (8)"),
    ("h.sweep('config.opt.lr', [True])", 'config.opt.lr=True is a bool'),
    ("h.sweep('config.seed', [1.5])", 'config.seed=1.5 is a float'),
    ("h.sweep('config.moe', [1])", 'config.moe holds a ConfigDict'),
    ("h.sweep('config.upcycle.args', [1])",
     'config.upcycle.args=1 is a int; the config holds a dict there'),
    ("h.sweep('seed', [1])", "sweep key 'seed' is neither config.<path> nor one of name"),
    ("h.sweep('config.seed', [0, 0])", "points 1 and 2 of the sweep share the run name 'run'"),
    ("h.sweep('name', ['a', 'a'])", "points 1 and 2 of the sweep share the run name 'a'"),
    ("h.fixed('name', 'a/b')", "run name 'a/b' must be"),
    ("h.fixed('name', 'plots')", "run name 'plots' must be"),
    ("h.fixed('config.init_from', h.run('nobody'))",
     "run 'run' refers to {run:nobody}, which is not a run of the sweep"),
    ("h.zipit([h.sweep('name', ['a', 'b']), "
     "h.sweep('config.init_from', [h.run('b'), h.run('a')])])",
     'runs depend on each other in a cycle: a -> b -> a'),
    ("h.chainit([h.fixed('name', 'p'), h.fixed('config.init_from', h.run('p', step=2))])",
     "run 'run' starts from step 2 of run 'p', which 'p' will not keep (it keeps its newest "
     'ckpt.keep=2; set its config.ckpt.keep_every to a divisor of 2)'),
    ("h.chainit([h.fixed('name', 'p'), h.fixed('config.init_from', h.run('p', step=3))])",
     'it saves every checkpoint_every_steps=2 steps'),
    ("h.chainit([h.fixed('name', 'p'), h.fixed('config.init_from', h.run('p', step=8))])",
     'it saves steps 1 to total_steps=4'),
    ("h.fixed('resume_from', '/x')", "resume_from='/x' must name a checkpoint of a run"),
    ("h.chainit([h.fixed('name', 'p'), h.product([h.fixed('resume_from', h.run('p', 4)), "
     "h.fixed('config.init_from', '/x')])])", 'a point starts from two places (resume_from, '
     'config.init_from)'),
    ("h.fixed('upcycle.src', '/x')", 'a point sets only one of upcycle.config, upcycle.src'),
    ("h.product([h.fixed('upcycle.src', '/x'), h.fixed('upcycle.config', 'configs/no.py')])",
     "upcycle.config='configs/no.py': no such file"),
    ("h.zipit([h.sweep('config.seed', [1]), h.sweep('config.seed', [2])])",
     "hyper.zipit: key 'config.seed' is set by two"),
    ("[]", 'get_hyper must return a non-empty list of dicts'),
    ("h.fixed('eval.ckpt', '/x')", 'eval.ckpt evaluates a checkpoint and trains nothing'),
    ("h.product([h.fixed('eval.ckpt', '/x'), h.fixed('eval.args', '--tasks=arc_easy'), "
     "h.fixed('config.init_from', '/y')])", 'the point needs eval.args and nothing that starts'),
    ("h.fixed('eval.args', '--tasks=arc_easy --out=/tmp/x')", 'the launcher sets --ckpt and --out'),
    ("h.product([h.fixed('upcycle.src', '/x'), h.fixed('upcycle.config', "
     "'configs/upcycle/grow_depth.py:method=dus + configs/no.py:experts=4')])",
     'no such file configs/no.py'),
])
def test_bad_sweep_is_one_line_and_writes_nothing(tmp_path, hyper_body, message):
  workdir = tmp_path / 'sweep_dir'
  with pytest.raises(ConfigError) as e:
    launch.launch(_sweep_file(tmp_path, hyper_body), str(workdir))
  assert message in str(e.value) and '\n' not in str(e.value)
  assert not workdir.exists()


def test_a_parent_may_keep_the_step_a_child_starts_from(tmp_path):
  body = ("h.chainit([h.product([h.fixed('name', 'p'), h.fixed('config.ckpt.keep_every', 2)]), "
          "h.fixed('config.init_from', h.run('p', step=2))])")
  _, runs = sweep.plan(_sweep_file(tmp_path, body))
  assert [(r.name, r.parents) for r in runs] == [('p', ()), ('run', ('p',))]


def test_workdir_of_other_runs_is_refused(tmp_path):
  workdir = tmp_path / 'sweep_dir'
  config = _sweep_file(tmp_path, "h.sweep('config.seed', [0, 1])")
  spec, runs = sweep.plan(config)
  sweep.write(str(workdir), spec, runs)
  before = sorted(os.listdir(workdir))
  (tmp_path / 'other.py').write_text((tmp_path / 'sweep.py').read_text())
  with pytest.raises(ConfigError, match=r'holds a sweep of --config=.*sweep.py, not .*other.py'):
    launch.launch(str(tmp_path / 'other.py'), str(workdir))
  with pytest.raises(ConfigError, match=r"--only: no run named 'seed=2' in the sweep"):
    launch.launch(config, str(workdir), only=['seed=0', 'seed=2'])
  (workdir / 'seed=1' / 'overrides.json').write_text('{"config.seed": 7}')
  with pytest.raises(ConfigError, match=r"run 'seed=1' in .* was launched with other overrides"):
    launch.launch(config, str(workdir))
  assert sorted(os.listdir(workdir)) == before


@pytest.mark.parametrize('args, message', [
    (['--backend=slurm'], "error: flag --backend=slurm: value should be one of <local|xm>"),
    (['--workdir=FILE'], 'error: --workdir=FILE is a file'),
    (['--config=configs/nowhere.py'], 'error: --config=' + _REPO + '/configs/nowhere.py: no such'),
    (['--config=configs/lm_moe.py:huge'], "model preset 'huge' is not one of"),
    (['--parallel=0'], 'error: flag --parallel=0: 0 is not a positive integer'),
])
def test_bad_flags_are_one_line_errors(tmp_path, args, message):
  (tmp_path / 'file').write_text('')
  args = [a.replace('FILE', str(tmp_path / 'file')) for a in args]
  workdir = f'--workdir={tmp_path}/sweep_dir'
  proc = cli('--config=configs/lm_moe.py:tiny', workdir, *args)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1, proc.stderr
  assert message.replace('FILE', str(tmp_path / 'file')) in lines[0], proc.stderr
  assert not (tmp_path / 'sweep_dir').exists()


def test_xm_backend_without_xmanager_says_how_to_install_it(tmp_path):
  shim = tmp_path / 'shim' / 'xmanager'   # an xmanager that fails to import, as if absent
  shim.mkdir(parents=True)
  (shim / '__init__.py').write_text("raise ImportError('No module named xmanager')\n")
  env = dict(os.environ, PYTHONPATH=f'{tmp_path / "shim"}')
  proc = subprocess.run(
      [sys.executable, '-m', 'experiments.launch', '--config=configs/lm_moe.py:tiny',
       f'--workdir={tmp_path}/sweep_dir', '--backend=xm'],
      cwd=_REPO, env=dict(env, PYTHONPATH=f'{tmp_path / "shim"}{os.pathsep}{_REPO}'),
      capture_output=True, text=True, check=False, timeout=120)
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.strip() == ("error: --backend=xm needs XManager: pip install -e '.[xm]' "
                                 "(No module named xmanager)")
  assert not (tmp_path / 'sweep_dir').exists()
