"""A dangling symbolic link is something that exists: an output path that is
one is refused without --overwrite (os.path.exists says False for it, so a
check with it would write through the link to wherever it points), and a
workdir path that is one is not a directory to create."""
import os

import pytest

from moe_jax import containment
from moe_jax.errors import ConfigError
from moe_jax.workdir import files, staging


@pytest.fixture
def dangling(tmp_path):
  """tmp_path/out -> tmp_path/elsewhere/target, which does not exist."""
  (tmp_path / 'elsewhere').mkdir()
  link = tmp_path / 'out'
  os.symlink(tmp_path / 'elsewhere' / 'target', link)
  assert os.path.lexists(link) and not os.path.exists(link)
  return link


def test_an_output_file_that_is_a_dangling_link_needs_overwrite(dangling):
  with pytest.raises(ConfigError, match=r'--out=.*out exists; pass --overwrite'):
    containment.output_file(str(dangling), '--out')
  # Replaced, not written through: the path returned is the link's own.
  assert containment.output_file(str(dangling), '--out', overwrite=True) == str(dangling)
  assert os.listdir(dangling.parent / 'elsewhere') == []


def test_a_staged_output_directory_that_is_a_dangling_link_needs_overwrite(dangling):
  with pytest.raises(ConfigError, match=r'--dst=.*out exists; pass --overwrite'):
    staging.check(str(dangling), False, '--dst')
  assert staging.check(str(dangling), True, '--dst') == str(dangling)


def test_a_workdir_that_is_a_dangling_link_is_not_a_directory(dangling):
  with pytest.raises(ConfigError, match=r'workdir .*out is not a directory'):
    files.check_dir_writable(str(dangling), 'workdir')
