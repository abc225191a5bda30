"""One-line mutants of the code against the tests meant to catch them.

  nice -n 5 python -m tests.mutation.run [--only=NAME,...] [--out=FILE] [--list]

Each mutant of `mutants.MUTANTS` is one plausible real bug: a text `old`
that occurs exactly once in a file, replaced by `new`. The script copies the
repository's files (tracked and untracked-but-not-ignored) to a temporary
directory, runs each mutant's tests there once on the unchanged copy (they
must pass, or the mutant's verdict would mean nothing) and once with the
mutant applied, and prints caught / survived per mutant. A mutant whose
`old` no longer occurs exactly once is `stale`: the code moved, the mutant
must follow it. Only each mutant's own tests run (node ids, not folders),
one pytest process at a time, without xdist: the 29 mutants took 387 s
on the 2-core machine beside a two-run sweep (2026-11-29: results.json, all
caught), not the suite's quarter hour.

Not part of the test suite: pytest collects test_*.py only. With --out it
writes the table as JSON with its provenance (experiments/provenance.py:
commit, versions, machine, date, command); the committed
tests/mutation/results.json is one such run.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from experiments import provenance
from tests.mutation import mutants as mutants_lib

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _git(*args):
  return subprocess.run(['git', *args], cwd=_REPO, capture_output=True, text=True,
                        check=True).stdout


def copy_repo(dst):
  """The repository's tracked and untracked-but-not-ignored files under `dst`."""
  for rel in _git('ls-files', '-co', '--exclude-standard', '-z').split('\0'):
    src = os.path.join(_REPO, rel)
    if rel and os.path.isfile(src):
      os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
      shutil.copy2(src, os.path.join(dst, rel))


def pytest(root, tests, timeout):
  """(exit code, seconds, last lines) of pytest on `tests` in the copy `root`."""
  env = dict(os.environ, PYTHONPATH=root)
  t0 = time.perf_counter()
  try:
    proc = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:xdist',
                           '-p', 'no:cacheprovider', *tests], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)
    code, tail = proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()[-3:]
  except subprocess.TimeoutExpired:
    code, tail = 'timeout', []
  return code, round(time.perf_counter() - t0, 1), tail


def apply(root, mutant):
  """Applies `mutant` in the copy; returns the original text, or None if stale."""
  path = os.path.join(root, mutant.file)
  with open(path) as f:
    text = f.read()
  if text.count(mutant.old) != 1:
    return None
  with open(path, 'w') as f:
    f.write(text.replace(mutant.old, mutant.new))
  return text


def line_of(mutant):
  """The 1-based line of `mutant.old` in the repository's own file (None: stale)."""
  with open(os.path.join(_REPO, mutant.file)) as f:
    text = f.read()
  if text.count(mutant.old) != 1:
    return None
  return text[:text.index(mutant.old)].count('\n') + 1


def run(selected, timeout):
  rows, baseline = [], {}
  with tempfile.TemporaryDirectory(prefix='mutation_') as root:
    copy_repo(root)
    for m in selected:
      row = dict(name=m.name, bug=m.bug, file=m.file, line=line_of(m), old=m.old, new=m.new,
                 tests=list(m.tests))
      key = tuple(m.tests)
      if key not in baseline:
        baseline[key] = pytest(root, m.tests, timeout)
      if baseline[key][0] != 0:
        row.update(result='baseline fails', detail=baseline[key][2])
      else:
        original = apply(root, m)
        if original is None:
          row.update(result='stale')
        else:
          try:
            code, seconds, tail = pytest(root, m.tests, timeout)
          finally:
            with open(os.path.join(root, m.file), 'w') as f:
              f.write(original)
          result = {0: 'survived', 1: 'caught'}.get(code, f'error ({code})')
          row.update(result=result, seconds=seconds, detail=tail)
      rows.append(row)
      print(f'{row["result"]:<16}{m.name}  {m.file}:{row["line"]}', flush=True)
  return rows


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--only', default='', help='comma-separated mutant names')
  parser.add_argument('--out', default='', help='write the table as JSON here')
  parser.add_argument('--list', action='store_true', help='list the mutants and exit')
  parser.add_argument('--timeout', type=float, default=600, help='seconds per pytest run')
  args = parser.parse_args(argv)
  names = [n for n in args.only.split(',') if n]
  known = {m.name for m in mutants_lib.MUTANTS}
  unknown = [n for n in names if n not in known]
  if unknown:
    print(f'error: --only: {", ".join(unknown)} not among the mutants', file=sys.stderr)
    return 2
  if args.out and os.path.lexists(args.out):
    print(f'error: --out={args.out} exists; remove it first', file=sys.stderr)
    return 2
  selected = [m for m in mutants_lib.MUTANTS if not names or m.name in names]
  if args.list:
    for m in selected:
      print(f'{m.name}  {m.file}:{line_of(m)}  {m.old!r} -> {m.new!r}  ({m.bug})')
    return 0
  t0 = time.perf_counter()
  rows = run(selected, args.timeout)
  caught = sum(r['result'] == 'caught' for r in rows)
  print(f'{caught} of {len(rows)} caught')
  if args.out:
    record = dict(provenance=provenance.record(None if argv is None else [__file__, *argv]),
                  wall_s=round(time.perf_counter() - t0), caught=caught, total=len(rows),
                  mutants=rows)
    with open(args.out, 'w') as f:
      f.write(json.dumps(record, indent=2) + '\n')
  return 0 if caught == len(rows) else 1


if __name__ == '__main__':
  sys.exit(main())
