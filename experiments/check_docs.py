r"""Docs and data cannot drift: every generated block in docs/ is rebuilt from
its committed results file and compared, and every results table has a source.

  python -m experiments.check_docs [--update]

A generated block in a docs page reads

  <!-- generated: experiments.quickstart --results=docs/seed000/quickstart.json -->
  ```
  ...what that command prints...
  ```
  <!-- end generated -->

and the check rebuilds its body with the named report's `from_results(path)`
(the registry below: one entry per report that reads a results file) and
fails on any difference; `--update` rewrites the bodies instead (a page is
replaced whole, atomically). In the pages of `RESULTS_PAGES`, every table
with a decimal number must be generated or lie in a section that says "Not
reproducible: raw outputs lost" (the runs' directories are gone; the note
names the command that reruns them). Exit status 1 on a finding,
with one line per finding.
"""
import os
import re
import sys

from absl import flags

from experiments import quickstart, report
from experiments.merge import report as merge_report
from experiments.moesturizer import letter_probe
from experiments.moesturizer import table as moesturizer_table
from experiments.seed000 import report as seed000_report
from experiments.seed001 import report as seed001_report
from experiments.seed002 import refit as seed002_refit
from experiments.seed002 import report as seed002_report
from experiments.seed003 import report as seed003_report
from moe_jax import atomic, cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_PAGES = ('docs/experiments.md', 'docs/moesturizer.md')
LOST = 'Not reproducible: raw outputs lost'

_BLOCK = re.compile(r'<!-- generated: (\S+) --results=(\S+) -->\n(.*?)<!-- end generated -->\n',
                    re.S)
_HEADING = re.compile(r'(#+) ')
_NUMBER = re.compile(r'\d\.\d')


def _code(text):
  return f'```\n{text.rstrip()}\n```\n'


def _markdown(from_results):
  return lambda path: from_results(path).rstrip() + '\n'


# A report that rebuilds docs from a results file alone: its module name (as
# the marker writes it) -> results path -> the block's body.
RENDERERS = {
    'experiments.quickstart': lambda path: _code(quickstart.text(quickstart.read(path))),
    'experiments.report': _markdown(report.from_results),
    'experiments.seed000.report': _markdown(seed000_report.from_results),
    'experiments.seed001.report': _markdown(seed001_report.from_results),
    'experiments.seed002.report': _markdown(seed002_report.from_results),
    'experiments.seed002.refit': _markdown(seed002_refit.from_results),
    'experiments.seed003.report': _markdown(seed003_report.from_results),
    'experiments.merge.report': _markdown(merge_report.from_results),
    'experiments.moesturizer.letter_probe': _markdown(letter_probe.from_results),
    'experiments.moesturizer.table': _markdown(moesturizer_table.table),
}


def _blocks(page, repo):
  """(match, fresh body or None for an unknown report) per generated block."""
  out = []
  for m in _BLOCK.finditer(page):
    render = RENDERERS.get(m.group(1))
    out.append((m, render(os.path.join(repo, m.group(2))) if render else None))
  return out


def _uncovered_tables(page):
  """Line numbers of tables with decimal numbers outside the sections the
  LOST note marks (a note covers the rest of its section, subsections included)."""
  lines = page.splitlines()
  covered, covered_level, heading_level = False, 0, 0
  found, in_table, in_code = [], False, False
  for i, line in enumerate(lines):
    if line.startswith('```'):
      in_code = not in_code
    h = None if in_code else _HEADING.match(line)   # a '# comment' in code is no heading
    if h:
      heading_level = len(h.group(1))
      if heading_level <= covered_level:
        covered, covered_level = False, 0
    if LOST in line:
      covered, covered_level = True, max(heading_level, 1)
    table_row = line.startswith('|')
    if table_row and not in_table:
      rows = []
      j = i
      while j < len(lines) and lines[j].startswith('|'):
        rows.append(lines[j])
        j += 1
      if not covered and any(_NUMBER.search(r) for r in rows[2:]):
        found.append(i + 1)
    in_table = table_row
  return found


def check(update=False, repo=REPO):
  """One line per finding (empty: docs and data agree)."""
  findings = []
  docs = os.path.join(repo, 'docs')
  for name in sorted(os.listdir(docs)):
    rel = f'docs/{name}'
    if not name.endswith('.md'):
      continue
    with open(os.path.join(docs, name)) as f:
      page = f.read()
    new, pos = [], 0
    for m, body in _blocks(page, repo):
      line = page[:m.start()].count('\n') + 1
      if body is None:
        findings.append(f'{rel}:{line}: no report {m.group(1)!r} in check_docs.RENDERERS')
      elif body != m.group(3):
        findings.append(f'{rel}:{line}: differs from `python -m {m.group(1)} '
                        f'--results={m.group(2)}`')
        new += [page[pos:m.start(3)], body]
        pos = m.end(3)
    if update and pos:
      atomic.write_text(os.path.join(docs, name), ''.join(new) + page[pos:])
    if rel in RESULTS_PAGES:   # a generated block's own lines are checked above
      bare = _BLOCK.sub(lambda m: '\n' * m.group(0).count('\n'), page)
      findings += [f'{rel}:{n}: a results table that is neither generated nor in a section '
                   f'marked "{LOST}"' for n in _uncovered_tables(bare)]
  return findings


def main(argv):
  del argv
  findings = cli.run_reporting_errors(check, flags.FLAGS.update)
  print('\n'.join(findings) if findings else 'docs agree with their results files')
  sys.exit(1 if findings else 0)


if __name__ == '__main__':
  flags.DEFINE_bool('update', False, 'Rewrite the generated blocks from their results files.')
  cli.run_app(main)
