"""A row of a bad-input table, and the test every table runs."""
import dataclasses
import os
import shutil
from typing import Callable, Optional

from tests.robustness import harness


@dataclasses.dataclass
class Row:
  """args: the CLI's arguments, with {tmp} (the row's own directory, its
  cwd), {wd} (the shared trained workdir, never to change), {copy} (a
  private copy of it, made when named), {cfg} (its training config file),
  {configs} (the repository's configs/). setup(paths) damages the copy or
  builds inputs before the run. The run must exit `rc` with one `error:`
  line matching `pattern` (a regex), and change nothing under {tmp} or {wd}."""
  args: list
  pattern: str
  setup: Optional[Callable] = None
  rc: int = 2
  module: str = ''   # the entry point, where one table drives several


def param(row_id, args, pattern, setup=None, rc=2, module=''):
  import pytest  # pylint: disable=g-import-not-at-top
  return pytest.param(Row(args.split() if isinstance(args, str) else args, pattern, setup, rc,
                          module), id=row_id)


def check(cli, module, row, tmp_path, trained):
  paths = dict(tmp=str(tmp_path), wd=trained, copy=str(tmp_path / 'copy'),
               cfg=os.path.join(os.path.dirname(__file__), 'tiny_config.py'),
               configs=harness.CONFIGS)
  if any('{copy}' in a for a in row.args):
    shutil.copytree(trained, paths['copy'], symlinks=True)
  if row.setup:
    row.setup(paths)
  before = harness.tree_digest(tmp_path, trained)
  result = cli.run(module, *[a.format(**paths) for a in row.args], cwd=tmp_path)
  harness.assert_one_error_line(result, row.rc, row.pattern)
  assert harness.tree_digest(tmp_path, trained) == before, 'the refused command wrote'
  return result
