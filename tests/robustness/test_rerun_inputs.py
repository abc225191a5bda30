"""experiments.rerun refuses an --out it could not write, and a results file
it could not compare against, before it launches anything: one ConfigError
(the command's one `error:` line), never a traceback after the whole rerun."""
import json
import os

import pytest

from experiments import rerun
from moe_jax.errors import ConfigError

_FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'experiments',
                        'rerun_fixture.json')


@pytest.fixture
def no_launch(monkeypatch):
  """A rerun that gets as far as launching fails the test."""
  def launch(*_, **__):
    raise AssertionError('the rerun launched before refusing')
  monkeypatch.setattr(rerun.launch, 'launch', launch)


@pytest.mark.parametrize('out, pattern', [
    ('none/r.json', r'--out=.*none/r.json: its folder .*none does not exist'),
    ('f/r.json', r'--out=.*f/r.json: its folder .*/f does not exist or is not a directory'),
])
def test_an_out_without_a_folder_is_refused_before_the_rerun(tmp_path, no_launch, out, pattern):
  (tmp_path / 'f').write_text('kept')
  with pytest.raises(ConfigError, match=pattern):
    rerun.rerun(_FIXTURE, workdir=str(tmp_path / 'w'), out=str(tmp_path / out))
  assert sorted(os.listdir(tmp_path)) == ['f']


def test_a_read_only_out_is_refused_before_the_rerun(tmp_path, read_only_dir, no_launch):
  with pytest.raises(ConfigError, match=r'--out=.*/ro/r.json: cannot write into .*/ro \(Read'):
    rerun.rerun(_FIXTURE, workdir=str(tmp_path / 'w'), out=f'{read_only_dir}/r.json')
  assert not os.path.exists(tmp_path / 'w')


def test_a_full_disk_is_refused_before_the_rerun(tmp_path, small_filesystem, no_launch):
  full = small_filesystem(1 << 20)
  with open(os.path.join(full, 'filler'), 'wb') as f:   # fill it
    try:
      while True:
        f.write(bytes(1 << 16))
        f.flush()
    except OSError:
      pass
  with pytest.raises(ConfigError, match=r'--out=.*/r.json: cannot write into .* \(No space left'):
    rerun.rerun(_FIXTURE, workdir=str(tmp_path / 'w'), out=f'{full}/r.json')
  assert os.listdir(full) == ['filler']


def _quickstart(**changes):
  record = json.load(open(_FIXTURE))
  record.update(changes)
  return record


@pytest.mark.parametrize('record, pattern', [
    (_quickstart(seeds=3), r'"seeds" must be a list of integers, not 3'),
    (_quickstart(seeds=['a']), r'"seeds" must be a list of integers'),
    (_quickstart(losses={'fixed': 5.0}), r'"losses"."fixed" must be a list of 1 numbers'),
    (_quickstart(losses={'fixed': ['5.2']}), r'"losses"."fixed" must be a list of 1 numbers'),
    (_quickstart(losses={'fixed': [5.2, 5.3]}), r'"losses"."fixed" must be a list of 1 numbers'),
    (_quickstart(arg=None, steps=None), r'"steps" must be an integer \(no "arg"\), not None'),
    (_quickstart(arg=3), r'"arg" must be a string, not 3'),
    (dict(sweep=3, runs=[]), r'"sweep" must be a string, not 3'),
    (dict(sweep='x.py', runs=[dict(name='a', final_val_loss='5.2')]),
     r"run 'a' needs a string \"name\", a number or null \"final_val_loss\""),
    (dict(sweep='x.py', runs=[dict(name='a', final_val_loss=5.2, config=[1])]),
     r"run 'a' needs .* an object or null \"config\""),
])
def test_a_bad_results_file_is_refused_before_the_rerun(tmp_path, no_launch, record, pattern):
  path = tmp_path / 'results.json'
  path.write_text(json.dumps(record))
  with pytest.raises(ConfigError, match=rf'^--results=.*results.json: {pattern}'):
    rerun.rerun(str(path), workdir=str(tmp_path / 'w'))
