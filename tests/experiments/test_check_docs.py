"""experiments.check_docs: the committed docs agree with their results files,
and a drifted block, an unsourced results table, a broken link, an overlong
page, a results file without provenance, a seed page's claim row missing
from the claims file and a README without its generated summary are caught;
docs/results.md's verdicts are recomputed from the results files and say
what they rest on."""
import json
import os
import shutil

import numpy as np

import pytest

from experiments import check_docs, results_page
from moe_jax.errors import ConfigError
from moe_jax.workdir import files
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
  os.makedirs(tmp_path / 'experiments')   # the committed quickstart.json predates provenance
  (tmp_path / check_docs.LEGACY_FILE).write_text('docs/seed000/quickstart.json\n')
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


def test_links_to_missing_files_and_headings_are_found(tmp_path):
  repo = _repo(tmp_path, '# A\n\n## Real heading\n\n[ok](#real-heading) [ok](seed000/quickstart.json)\n'
               '[gone](nope.md) [bad anchor](experiments.md#no-such-heading)\n'
               '```\n[in code](nope.md)\n```\n')
  assert check_docs.check(repo=repo) == [
      "docs/experiments.md:6: link 'nope.md': no file docs/nope.md",
      "docs/experiments.md:6: link 'experiments.md#no-such-heading': no heading "
      '#no-such-heading in docs/experiments.md']


def test_a_page_over_the_limit_is_found(tmp_path):
  repo = _repo(tmp_path, '# A\n' + 'line\n' * check_docs.MAX_LINES)
  assert check_docs.check(repo=repo) == [
      f'docs/experiments.md: {check_docs.MAX_LINES + 1} lines, over {check_docs.MAX_LINES}: '
      'split the page']


def test_results_files_need_provenance_unless_listed_and_present(tmp_path):
  repo = _repo(tmp_path, '# A\n')
  (tmp_path / 'docs' / 'seed000' / 'new.jsonl').write_text(
      json.dumps({'x': 1, 'provenance': dict.fromkeys(check_docs.provenance.KEYS)}) + '\n'
      + json.dumps({'x': 2}) + '\n')
  (tmp_path / 'docs' / 'seed000' / 'metrics.jsonl').write_text('{"step": 1}\n')   # a run's file
  with open(tmp_path / check_docs.LEGACY_FILE, 'a') as f:
    f.write('docs/seed000/gone.json\n')
  findings = check_docs.check(repo=repo)
  assert findings == [
      f'{check_docs.LEGACY_FILE}: docs/seed000/gone.json is gone: take it off the list',
      'docs/seed000/new.jsonl: no provenance record (experiments/provenance.py): lacks '
      + ', '.join(sorted(check_docs.provenance.KEYS))]


def _claim(**kw):
  c = dict(claim='more experts help', quantity='d', scale='tiny', seeds='3', section='x.md',
           value={'quickstart': 'docs/seed000/quickstart.json', 'paired': 'Fixed-E - Fixed-2E'})
  c.update(kw)
  return {'seeds': [dict(seed='000', paper='p', page='x.md', summary='s', claims=[c])]}


def test_a_verdict_is_recomputed_from_the_results_file():
  # The 3-seed quickstart's Fixed-E - Fixed-2E interval, [-0.0107, +0.0470], holds 0.
  (_, got), = results_page.rows(_claim(supports=[0, None]))
  assert got[0][1] == 'inconclusive' and '+0.0181 [-0.0107, +0.0470]' in got[0][3]
  (_, got), = results_page.rows(_claim(supports=[-1, 1]))
  assert got[0][1] == 'agrees'
  with pytest.raises(ConfigError, match="states 'agrees', its interval says 'inconclusive'"):
    results_page.rows(_claim(supports=[0, None], verdict='agrees'))
  with pytest.raises(ConfigError, match='states a number without a source'):
    results_page.rows(_claim(value=None, verdict='agrees', ours='eta 0.98'))


def test_a_verdict_says_it_rests_on_one_seed_or_no_interval(tmp_path):
  (_, got), = results_page.rows(_claim(supports=[-1, 1], seeds='1 (0)'))
  assert got[0][1:3] == ('agrees', ['1 seed'])
  (_, got), = results_page.rows(_claim(value=None, verdict='disagrees', ours='worse'))
  assert got[0][1:3] == ('disagrees', ['no interval'])
  (tmp_path / 'c.json').write_text(json.dumps(
      _claim(value=None, verdict='disagrees', ours='worse', seeds='1', note='why')))
  assert '| **disagrees** (1 seed, no interval; why) |' in results_page.from_results(
      str(tmp_path / 'c.json'))


def test_a_claim_outside_the_papers_setting_is_inconclusive_whatever_its_interval():
  # [-0.0107, +0.0470] agrees with [-1, 1]; outside the paper's setting it may not.
  (_, got), = results_page.rows(_claim(supports=[-1, 1], outside='K/E below the paper\'s',
                                       verdict='inconclusive'))
  assert got[0][1] == 'inconclusive' and 'the interval alone: agrees' in got[0][2][0]
  with pytest.raises(ConfigError, match='outside the paper'):
    results_page.rows(_claim(supports=[-1, 1], outside='K/E below the paper\'s'))


def _seed_page(tmp_path, rows, page):
  repo = _repo(tmp_path, '# A\n')
  (tmp_path / 'docs' / 'seed009.md').write_text(page)
  (tmp_path / 'docs' / 'claims.json').write_text(json.dumps(
      {'seeds': [dict(seed='009', paper='p', page='seed009.md', summary='s',
                      claims=[dict(claim='c', rows=rows)])]}))
  return repo


def test_every_claim_row_of_a_seed_page_is_in_the_claims_file(tmp_path):
  page = ('# S\n\n| claim | ours | verdict |\n|---|---|---|\n| more is better | x | agrees |\n'
          "| less is better | x | disagrees |\n| odd is better (not the paper's axis) | x | agrees |\n"
          '\n- **Deeper is better**: **inconclusive**, at\n  3 seeds.\n')
  findings = check_docs.uncovered_claims(_seed_page(
      tmp_path, ['seed009.md: more is better', 'seed009.md: wider is better'], page))
  assert findings == [
      'docs/seed009.md:6: a claim row that no claim in docs/claims.json covers '
      '(its "rows": "seed009.md: <text of the row>")',
      'docs/seed009.md:9: a claim row that no claim in docs/claims.json covers '
      '(its "rows": "seed009.md: <text of the row>")',
      "docs/claims.json: row 'seed009.md: wider is better' matches no claim row of its page"]
  assert check_docs.uncovered_claims(_seed_page(
      tmp_path / 'b', ['seed009.md: more is better', 'seed009.md: less is',
                       'seed009.md: Deeper is better'], page)) == []


def test_the_readme_summary_must_be_generated(tmp_path):
  repo = _repo(tmp_path, '# A\n')
  (tmp_path / 'README.md').write_text('# R\n\nIn five lines: all good.\n')
  assert check_docs.check(repo=repo) == [
      'README.md: no summary generated from docs/claims.json (experiments.results_page --summary)']


def test_a_reference_paper_is_titled_by_its_own_name(tmp_path):
  claims = _claim(supports=[-1, 1])
  claims['seeds'][0].update(seed='2410.07524', title='He et al., arXiv 2410.07524')
  (tmp_path / 'c.json').write_text(json.dumps(claims))
  assert results_page.from_results(str(tmp_path / 'c.json')).startswith(
      '## He et al., arXiv 2410.07524: p\n')
  assert results_page.summary(str(tmp_path / 'c.json')).startswith(
      '- He et al., arXiv 2410.07524 (p): s (1 agrees).')


def test_a_runs_source_pairs_b_from_another_file_by_position():
  """`b_runs`: b's runs from another sweep's file, paired with a's by
  position (both sweeps grew the same Fixed-E run per seed)."""
  sampled, dhondt = 'docs/seed000/table4_sampled.json', 'docs/seed000/table4_dhondt.json'
  names = lambda arm: [f'cpt=25_{arm}'] + [f's{s}_cpt=25_{arm}' for s in range(1, 6)]
  loss = lambda file: {r['name']: r['final_val_loss'] for r in files.read_json(
      os.path.join(results_page._REPO, file))['runs']}   # pylint: disable=protected-access
  a, b = loss(sampled), loss(dhondt)
  got = results_page.resolve(dict(runs=sampled, b_runs=dhondt, a=names('grad_norm'),
                                  b=names('equal_draw')))
  np.testing.assert_allclose(got['estimate'], np.mean(
      [a[x] - b[y] for x, y in zip(names('grad_norm'), names('equal_draw'))]), rtol=1e-12)
  with pytest.raises(ConfigError, match=f'{sampled} has no finished run'):
    results_page.resolve(dict(runs=sampled, b_runs=dhondt, a=names('equal_draw'),
                              b=names('equal_draw')))
