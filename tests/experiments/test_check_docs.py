"""experiments.check_docs: the committed docs agree with their results files,
and a drifted block or an unsourced results table is caught."""
import os
import shutil

from experiments import check_docs
from tests.experiments import runs

_BLOCK = ('<!-- generated: experiments.quickstart --results=docs/seed000/quickstart.json -->\n'
          '{body}<!-- end generated -->\n')


def test_committed_docs_agree_with_their_results_files():
  assert check_docs.check() == []


def _repo(tmp_path, page):
  os.makedirs(tmp_path / 'docs' / 'seed000')
  shutil.copy(os.path.join(runs.REPO, 'docs', 'seed000', 'quickstart.json'),
              tmp_path / 'docs' / 'seed000' / 'quickstart.json')
  (tmp_path / 'docs' / 'experiments.md').write_text(page)
  return str(tmp_path)


def test_a_drifted_block_is_found_and_updated(tmp_path):
  good = check_docs.RENDERERS['experiments.quickstart'](
      os.path.join(runs.REPO, 'docs', 'seed000', 'quickstart.json'))
  drifted = good.replace('p = 0.11', 'p = 0.01')
  assert drifted != good
  repo = _repo(tmp_path, '# A\n\n' + _BLOCK.format(body=drifted) + '\nafter\n')
  findings = check_docs.check(repo=repo)
  assert findings == ['docs/experiments.md:3: differs from `python -m experiments.quickstart '
                      '--results=docs/seed000/quickstart.json`']
  assert check_docs.check(update=True, repo=repo)   # reports what it rewrote
  assert check_docs.check(repo=repo) == []
  assert (tmp_path / 'docs' / 'experiments.md').read_text() == (
      '# A\n\n' + _BLOCK.format(body=good) + '\nafter\n')


def test_results_tables_need_a_source(tmp_path):
  table = '| run | loss |\n|---|---|\n| a | 1.5 |\n'
  page = ('# Doc\n\n## Lost\n\nNot reproducible: raw outputs lost (run 2026-11-23); rerun with X.\n\n'
          '### Sub\n\n```\n# a comment, not a heading\n```\n\n' + table + '\n## Plain\n\n| what | where |\n|---|---|\n| a | b |\n\n'
          '## Unsourced\n\n' + table)
  findings = check_docs.check(repo=_repo(tmp_path, page))
  assert len(findings) == 1 and findings[0].startswith('docs/experiments.md:25: a results table')
