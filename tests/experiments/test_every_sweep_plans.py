"""Every sweep config in the repository plans, at its default and at `:small`:
each run's config passes the trainer's own checks, and the model an in-run
transition grows is a valid model, all before any run starts.

This is what keeps a study's configs honest in CI where its `:small` sweep
trains only under `-m slow` (their reports are tested on made-up runs).
"""
import glob
import os
import pathlib
import re

import pytest

from experiments import sweep
from moe_jax.errors import ConfigError
from tests.experiments import runs

_FILES = sorted(
    os.path.relpath(path, runs.REPO)
    for path in glob.glob(os.path.join(runs.REPO, 'experiments', '**', '*.py'), recursive=True)
    + [os.path.join(runs.REPO, 'configs', 'quickstart.py')]
    if re.search(r'^def get_hyper\(', pathlib.Path(path).read_text(), re.M))
# Specs that need an argument a user gives: the reason, in the config's own error.
_REFUSED = {
    'experiments/example/config.py:small': "config argument 'small' is not one of",
    # The full grid's DUS 20 % of the stand-in base's two layers copies none:
    # the full grid is for a real base (base=DIR).
    'experiments/moesturizer/config.py': 'grid=full on the stand-in base of 2 layers: '
                                         r'upcycle.args.percent=20 .* \(give base=DIR',
}
_SPECS = [f + arg for f in _FILES for arg in ('', ':small')]


def test_every_study_is_found():
  assert len(_FILES) >= 27 and 'experiments/seed000/table5.py' in _FILES


@pytest.mark.parametrize('spec', _SPECS)
def test_the_sweep_plans(spec):
  if spec in _REFUSED:
    with pytest.raises(ConfigError, match=_REFUSED[spec]):
      sweep.plan(os.path.join(runs.REPO, spec))
  else:
    _, planned = sweep.plan(os.path.join(runs.REPO, spec))
    assert planned and len({r.name for r in planned}) == len(planned)


def test_a_bad_in_run_target_is_refused_at_plan(tmp_path):
  """The in-run transition's grown model is checked with the rest of the
  sweep, not when its run starts, which may be hours later, after its parents."""
  path = tmp_path / 'sweep.py'
  path.write_text(runs.TINY + (
      'def get_hyper(h):\n'
      "  return h.product([h.fixed('config.upcycle.step', 2),\n"
      "                    h.fixed('config.upcycle.recipe', 'expand_experts'),\n"
      "                    h.fixed('config.upcycle.target', {'moe': {'top_kk': 2}})])\n"))
  with pytest.raises(ConfigError, match=r"run 'run': upcycle.target.moe.top_kk is not a config"):
    sweep.plan(str(path))
