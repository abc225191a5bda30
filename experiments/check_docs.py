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
names the command that reruns them). Beside the blocks it checks, for
every page under docs/ (and the README's links):

  links       every relative link outside code and generated blocks names a
              file that exists, and a `page.md#anchor` a heading of that page
  length      no docs page is over MAX_LINES lines (a reader takes in a page)
  provenance  every results file under docs/ (.json, .jsonl: every line) has
              experiments/provenance.py's record, except the files listed in
              LEGACY_FILE (written before the record existed; a listed file
              that is gone is a finding, so the list only shrinks) and a run's
              own files copied beside them (RUN_FILES; CSV tables carry none:
              the JSON results file beside them does)

Exit status 1 on a finding, with one line per finding.
"""
import json
import os
import re
import sys

from absl import flags

from experiments import provenance, quickstart, report, results_page
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
# The pages whose tables are results: the seed pages, seed 004's, the results page.
RESULTS_PAGES = re.compile(r'docs/(experiments|seed\d+|moesturizer\w*|results)\.md')
LOST = 'Not reproducible: raw outputs lost'
MAX_LINES = 700
LEGACY_FILE = 'experiments/provenance_legacy.txt'
RUN_FILES = re.compile(r'(metrics\.jsonl|overrides\.json|upcycle_report\.json|config\.json|'
                       r'status\.json|lineage\.json|benchmarks\.\d+\.jsonl)')
CLAIMS = 'docs/claims.json'   # what docs/results.md states; its numbers come from results files
# The seed pages, whose claim rows CLAIMS must cover, and the words by which a
# row says it is no claim of the paper.
SEED_PAGES = re.compile(r'docs/(seed\d+\w*|moesturizer\w*)\.md')
NOT_CLAIMS = ("not the paper's axis", 'no claim of the paper')

_BLOCK = re.compile(r'<!-- generated: (\S+) --results=(\S+)((?: --\w+)*) -->\n(.*?)'
                    r'<!-- end generated -->\n', re.S)
_HEADING = re.compile(r'(#+) ')
_LINK = re.compile(r'\]\(([^)\s]+)\)')
_NUMBER = re.compile(r'\d\.\d')
_VERDICT = re.compile(r'(?i)\b(agrees|disagrees|inconclusive|not run)\b')
_BOLD = re.compile(r'\*\*(.+?)\*\*')


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
    'experiments.results_page': _markdown(results_page.from_results),
    'experiments.results_page --summary': results_page.summary,
}


def _blocks(page, repo):
  """(match, fresh body or None for an unknown report) per generated block."""
  out = []
  for m in _BLOCK.finditer(page):
    render = RENDERERS.get(m.group(1) + m.group(3))
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


def _pages(repo):
  """docs/**/*.md as paths relative to `repo`, sorted."""
  out = []
  for root, _, names in os.walk(os.path.join(repo, 'docs')):
    out += [os.path.relpath(os.path.join(root, n), repo) for n in names if n.endswith('.md')]
  return sorted(out)


def slug(heading):
  """GitHub's anchor of a heading's text."""
  return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


def _anchors(text):
  """The anchors of a page's headings (outside code blocks), GitHub's -1, -2
  suffixes for repeats included."""
  seen, in_code = {}, False
  for line in text.splitlines():
    if line.startswith('```'):
      in_code = not in_code
    if not in_code and _HEADING.match(line):
      base = slug(line.lstrip('#'))
      n = seen.get(base, 0)
      seen[base] = n + 1
      yield base if n == 0 else f'{base}-{n}'


def _prose(text):
  """(line number, line, inside a generated block) outside code blocks."""
  generated = set()
  for m in _BLOCK.finditer(text):
    first = text[:m.start()].count('\n') + 1
    generated.update(range(first, first + m.group(0).count('\n')))
  in_code = False
  for n, line in enumerate(text.splitlines(), 1):
    if line.startswith('```'):
      in_code = not in_code
    elif not in_code:
      yield n, line, n in generated


def broken_links(rel, text, repo):
  """Findings for the relative links of page `rel` that name no file, or no
  heading of the page they name. In a generated block only links to pages
  count: its other links are its report's, relative to where that writes."""
  findings, anchors = [], {}
  for n, line, generated in _prose(text):
    for target in _LINK.findall(line):
      if re.match(r'[a-z]+:', target) or (generated and '.md' not in target):
        continue
      path, _, anchor = target.partition('#')
      full = os.path.normpath(os.path.join(repo, os.path.dirname(rel), path)) if path else \
          os.path.join(repo, rel)
      if not os.path.exists(full):
        findings.append(f'{rel}:{n}: link {target!r}: no file {os.path.relpath(full, repo)}')
      elif anchor and full.endswith('.md'):
        if full not in anchors:
          with open(full) as f:
            anchors[full] = set(_anchors(f.read()))
        if anchor not in anchors[full]:
          findings.append(f'{rel}:{n}: link {target!r}: no heading #{anchor} in '
                          f'{os.path.relpath(full, repo)}')
  return findings


def _results_files(repo):
  for root, _, names in os.walk(os.path.join(repo, 'docs')):
    for n in names:
      rel = os.path.relpath(os.path.join(root, n), repo)
      if n.endswith(('.json', '.jsonl')) and not RUN_FILES.fullmatch(n) and rel != CLAIMS:
        yield rel


def unrecorded(repo):
  """Findings for results files without a provenance record (LEGACY_FILE's aside)."""
  legacy = set()
  if os.path.exists(os.path.join(repo, LEGACY_FILE)):
    with open(os.path.join(repo, LEGACY_FILE)) as f:
      legacy = {l.strip() for l in f if l.strip() and not l.startswith('#')}
  findings = [f'{LEGACY_FILE}: {p} is gone: take it off the list'
              for p in sorted(legacy) if not os.path.exists(os.path.join(repo, p))]
  for rel in sorted(_results_files(repo)):
    if rel in legacy:
      continue
    with open(os.path.join(repo, rel)) as f:
      text = f.read()
    try:
      objs = [json.loads(l) for l in text.splitlines() if l.strip()] if rel.endswith('.jsonl') \
          else [json.loads(text)]
    except ValueError as e:
      findings.append(f'{rel}: not JSON ({e})')
      continue
    lacking = sorted({k for o in objs for k in provenance.missing(o)})
    if lacking:
      findings.append(f'{rel}: no provenance record (experiments/provenance.py): lacks '
                      + ', '.join(lacking))
  return findings


def _claim_rows(text):
  """(line number, text) of a seed page's claim rows: each table row whose last
  cell holds a verdict, and each paragraph or list item with a bold
  span holding one (code blocks aside). A row that says it is no claim of
  the paper (NOT_CLAIMS) is none."""
  out, para, start = [], [], 0
  def flush():
    joined = ' '.join(para)
    if any(_VERDICT.search(b) for b in _BOLD.findall(joined)):
      out.append((start, joined))
  for n, line, _ in _prose(text):
    if line.startswith('|'):
      cells = [c.strip() for c in line.strip().strip('|').split('|')]
      if len(cells) > 1 and _VERDICT.search(cells[-1]):
        out.append((n, line))
    if not line.strip() or line.startswith(('|', '#')) or re.match(r'\s*([-*]|\d+\.) ', line):
      flush()
      para, start = ([line], n) if line.strip() and not line.startswith(('|', '#')) else ([], n)
    else:
      para.append(line.strip())
  flush()
  return [(n, t) for n, t in out if not any(x in t for x in NOT_CLAIMS)]


def uncovered_claims(repo):
  """Findings for seed pages' claim rows that no claim of CLAIMS covers (its
  `rows`: "page.md: text the row holds"), and for `rows` entries that match
  no claim row (so the list cannot go stale)."""
  path = os.path.join(repo, CLAIMS)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    wanted = [r for seed in json.load(f)['seeds'] for c in seed['claims'] for r in c.get('rows', [])]
  by_page, used, findings = {}, set(), []
  for r in wanted:
    page, sep, text = r.partition(': ')
    if not sep:
      findings.append(f'{CLAIMS}: row {r!r} is not "page.md: text"')
    by_page.setdefault(page, []).append((r, text))
  for rel in _pages(repo):
    if not SEED_PAGES.fullmatch(rel):
      continue
    with open(os.path.join(repo, rel)) as f:
      text = f.read()
    mine = by_page.get(os.path.relpath(rel, 'docs'), [])
    for n, row in _claim_rows(text):
      hits = [r for r, t in mine if t in row]
      used.update(hits)
      if not hits:
        findings.append(f'{rel}:{n}: a claim row that no claim in {CLAIMS} covers '
                        f'(its "rows": "{os.path.relpath(rel, "docs")}: <text of the row>")')
  findings += [f'{CLAIMS}: row {r!r} matches no claim row of its page'
               for r in wanted if r not in used]
  return findings


def check(update=False, repo=REPO):
  """One line per finding (empty: docs and data agree)."""
  findings = []
  readme = ['README.md'] if os.path.exists(os.path.join(repo, 'README.md')) else []
  for rel in _pages(repo) + readme:
    path = os.path.join(repo, rel)
    with open(path) as f:
      page = f.read()
    new, pos = [], 0
    for m, body in _blocks(page, repo):
      line = page[:m.start()].count('\n') + 1
      if body is None:
        findings.append(f'{rel}:{line}: no report {m.group(1) + m.group(3)!r} in '
                        'check_docs.RENDERERS')
      elif body != m.group(4):
        findings.append(f'{rel}:{line}: differs from `python -m {m.group(1)} '
                        f'--results={m.group(2)}{m.group(3)}`')
        new += [page[pos:m.start(4)], body]
        pos = m.end(4)
    if update and pos:
      atomic.write_text(path, ''.join(new) + page[pos:])
    if RESULTS_PAGES.fullmatch(rel):   # a generated block's own lines are checked above
      bare = _BLOCK.sub(lambda m: '\n' * m.group(0).count('\n'), page)
      findings += [f'{rel}:{n}: a results table that is neither generated nor in a section '
                   f'marked "{LOST}"' for n in _uncovered_tables(bare)]
    if rel in readme:
      if '<!-- generated: experiments.results_page --results=docs/claims.json --summary -->' \
          not in page:
        findings.append('README.md: no summary generated from docs/claims.json '
                        '(experiments.results_page --summary)')
    elif page.count('\n') > MAX_LINES:
      findings.append(f'{rel}: {page.count(chr(10))} lines, over {MAX_LINES}: split the page')
    findings += broken_links(rel, page, repo)
  return findings + uncovered_claims(repo) + unrecorded(repo)


def main(argv):
  del argv
  findings = cli.run_reporting_errors(check, flags.FLAGS.update)
  print('\n'.join(findings) if findings else 'docs agree with their results files')
  sys.exit(1 if findings else 0)


if __name__ == '__main__':
  flags.DEFINE_bool('update', False, 'Rewrite the generated blocks from their results files.')
  cli.run_app(main)
