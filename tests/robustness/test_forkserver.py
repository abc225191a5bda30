"""The fork server (fast path) against fresh interpreters (the reference):
the same exit status, stdout and stderr for a sample of every CLI's rows."""
import pytest

from tests.robustness import harness

CASES = [
    ('moe_jax.main', '--config={configs}/lm_moe.py:tiny', '--workdir={tmp}/run',
     '--config.moe.top_k=9'),
    ('moe_jax.main', '--config={configs}/lm_moe.py:tiny', '--workdir={tmp}/run', 'extra'),
    ('moe_jax.evaluate', '--ckpt={tmp}', '--batches=-1'),
    ('moe_jax.upcycle', '--config={configs}/upcycle/expand_experts.py:factor=1', '--src={tmp}',
     '--dst={tmp}/x'),
    ('moe_jax.scaling_laws', 'dstar', '--n1=inf'),
    ('moe_jax.scaling_laws', 'cost', '--s_E=2.1', '--s_mE=4.1', '--T=100', '--tau=60'),
]


@pytest.mark.parametrize('case', CASES, ids=lambda c: f'{c[0]}:{c[-1]}')
def test_fork_server_runs_like_a_fresh_interpreter(cli, tmp_path, case):
  module, *args = case
  args = [a.format(configs=harness.CONFIGS, tmp=tmp_path) for a in args]
  fast = cli.run(module, *args, cwd=tmp_path)
  slow = harness.subprocess_run(module, *args, cwd=tmp_path)
  assert (fast.rc, fast.stdout, fast.stderr) == (slow.rc, slow.stdout, slow.stderr)
