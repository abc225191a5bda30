"""moe_jax/containment.py: a destination inside, equal to or above its source
is refused, compared as resolved paths; one apart from it passes."""
import os

import pytest

from moe_jax import containment
from moe_jax.errors import ConfigError


@pytest.fixture
def tree(tmp_path):
  (tmp_path / 'src' / 'checkpoints').mkdir(parents=True)
  (tmp_path / 'other').mkdir()
  os.symlink(tmp_path / 'src', tmp_path / 'to_src')
  os.symlink(tmp_path / 'src' / 'checkpoints', tmp_path / 'into_src')
  os.symlink(tmp_path, tmp_path / 'other' / 'to_root')
  return tmp_path


@pytest.mark.parametrize('dst', [
    'src', 'src/x', 'src/checkpoints/x', '.', 'to_src', 'to_src/x', 'into_src', 'into_src/x',
    'other/to_root', 'other/to_root/src/y', 'src/../src'])
def test_overlapping_destinations_are_refused(tree, dst):
  with pytest.raises(ConfigError, match=r'--out=.* must lie outside --src \(workdir .*src\)'):
    containment.apart(str(tree / dst), '--out', str(tree / 'src'), '--src', 'workdir')


@pytest.mark.parametrize('dst', ['other', 'other/x', 'src2', 'sr'])
def test_destinations_apart_pass(tree, dst):
  containment.apart(str(tree / dst), '--out', str(tree / 'src'), '--src', 'workdir')


def test_a_source_given_through_a_link(tree):
  with pytest.raises(ConfigError, match='must lie outside'):
    containment.apart(str(tree / 'src' / 'x'), '--out', str(tree / 'to_src'), '--src')


def test_inside_ok_allows_a_file_inside_never_the_source_or_above(tree):
  containment.apart(str(tree / 'src' / 'n.png'), '--plot', str(tree / 'src'), '--ckpt',
                    inside_ok=True)
  for dst in ('src', 'to_src', '.'):
    with pytest.raises(ConfigError, match='must lie outside'):
      containment.apart(str(tree / dst), '--plot', str(tree / 'src'), '--ckpt', inside_ok=True)


@pytest.mark.parametrize('path, root, want', [
    ('/a/b', '/a', True), ('/a/b/c', '/a', True), ('/a', '/a', False), ('/ab', '/a', False),
    ('/', '/a', False), ('/x/a', '/a', False)])
def test_within_is_strictly_inside(path, root, want):
  assert containment.within(path, root) is want


@pytest.mark.parametrize('marks, want', [
    (('config.json', 'checkpoints'), True),
    (('config.json', 'metrics.jsonl'), True),   # its checkpoints/ deleted
    (('metrics.jsonl', 'run.json'), True),
    (('lineage.json', 'checkpoints'), True),
    (('config.json',), False),                  # an HF export's
    (('checkpoints',), False),
    ((), False),
])
def test_a_workdir_is_two_of_its_marks(tmp_path, marks, want):
  for mark in marks:
    (tmp_path / mark).mkdir() if mark == 'checkpoints' else (tmp_path / mark).write_text('{}')
  assert containment.is_workdir(str(tmp_path)) is want
  assert (containment.run_holding(str(tmp_path / 'a' / 'b.json')) == str(tmp_path)) is want


def test_outputs_on_one_path_are_refused(tree):
  with pytest.raises(ConfigError, match=r'--plot=.*x.png and --out=.*x.png are one path'):
    containment.output_files([(str(tree / 'other' / 'x.png'), '--out'),
                              (str(tree / 'other' / 'to_root' / 'other' / 'x.png'), '--plot')])
  got = containment.output_files([(str(tree / 'other' / 'x.json'), '--out'), ('', '--plot'),
                                  (str(tree / 'other' / 'x.png'), '--plot')])
  assert got == [str(tree / 'other' / 'x.json'), str(tree / 'other' / 'x.png')]
