"""`python -m moe_jax.evaluate --tasks=...` on a tiny checkpoint and tiny
offline data: one JSON line per task, the same subset for every model, and
one-line errors that write nothing."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.eval import generation, harness, restore, tasks
from moe_jax.train import trainer
from tests.eval import olmo_fixture
from tests.train import tiny

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def ckpt(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('run'))
  trainer.train_and_evaluate(tiny.config(**{
      'total_steps': 1, 'eval_every_steps': 1, 'eval_batches': 1, 'checkpoint_every_steps': 1,
      'moe.num_experts': 0}), workdir)
  return workdir


@pytest.fixture(scope='module')
def data(tmp_path_factory):
  return olmo_fixture.write_eval(str(tmp_path_factory.mktemp('olmo_eval')))


def _evaluate(*args):
  env = dict(os.environ, PYTHONPATH=_REPO)
  return subprocess.run([sys.executable, '-m', 'moe_jax.evaluate', *args], cwd=_REPO, env=env,
                        capture_output=True, text=True, check=False)


def test_loglik_lines(ckpt, data, tmp_path):
  out = tmp_path / 'bench.jsonl'
  proc = _evaluate(f'--ckpt={ckpt}', '--tasks=arc_easy,hellaswag', '--mode=loglik',
                   '--limit=3', f'--data_dir={data}', f'--out={out}')
  assert proc.returncode == 0, proc.stderr
  lines = [json.loads(line) for line in proc.stdout.strip().splitlines()]
  assert out.read_text().splitlines() == proc.stdout.strip().splitlines()
  assert [(r['task'], r['mode'], r['n'], r['metric']) for r in lines] == [
      ('arc_easy', 'loglik', 3, 'acc_norm'), ('hellaswag', 'loglik', 2, 'acc_norm')]
  for r in lines:
    assert r['accuracy'] == r['correct'] / r['n'] and r['ci95'] == list(
        harness.wilson(r['correct'], r['n'])) and r['step'] == 1
    assert sum(r['letters'].values()) == sum(r['gold_letters'].values()) == r['n']


def test_acc_and_acc_norm_rank_differently():
  """Hand-made sums where the raw and the per-character rankings disagree:
  acc takes the largest sum, acc_norm the largest sum per character."""
  def q(choices, gold):
    return tasks.Question('q', 'ctx', tuple(choices), gold, '', '', tasks.MC)
  questions = [
      q(['a', 'abcdefghij'], 0),         # raw: -2 > -5; per char: -2.0 < -0.5
      q(['a', 'abcdefghij'], 1),
      q(['abcd', 'ab', 'abcdefgh'], 2),  # 3 choices in a 4-wide array: -inf pads
      q(['x', 'y', 'z', 'w'], 3),        # equal lengths: both rankings agree
  ]
  sums_QC = np.array([[-2.0, -5.0, -np.inf, -np.inf],
                      [-2.0, -5.0, -np.inf, -np.inf],
                      [-4.0, -3.0, -6.0, -np.inf],   # per char: -1.0, -1.5, -0.75
                      [-4.0, -3.0, -2.0, -1.0]], np.float32)
  acc, acc_norm = harness.rank(sums_QC, questions)
  np.testing.assert_array_equal(acc, [True, False, False, True])
  np.testing.assert_array_equal(acc_norm, [False, True, True, True])
  # The letters of acc_norm's picks: B, B, C, D; the gold ones A, B, C, D.
  assert harness.loglik_letters(sums_QC, questions) == dict(
      letters={'B': 2, 'C': 1, 'D': 1}, gold_letters={'A': 1, 'B': 1, 'C': 1, 'D': 1})


def test_bad_input_is_one_line_and_writes_nothing(ckpt, tmp_path):
  out = tmp_path / 'bench.jsonl'
  proc = _evaluate(f'--ckpt={ckpt}', '--tasks=arc_easy,mmlu_pro', f'--out={out}')
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: task mmlu_pro: MMLU-Pro is not in')
  assert not out.exists() and proc.stdout == ''


@pytest.mark.parametrize('names, mode, limit, data_dir, message', [
    (['arc_easy'], 'loglik', -1, None, '--limit=-1 must be positive'),
    (['arc_easy', 'bogus'], 'loglik', None, None, "unknown task 'bogus'"),
    (['arc_easy', 'gsm8k'], 'generate', None, '/no/such/dir', 'task arc_easy: no data at /no'),
])
def test_bad_requests_stop_before_the_checkpoint_loads(tmp_path, names, mode, limit, data_dir,
                                                       message):
  out = tmp_path / 'bench.jsonl'
  with pytest.raises(ConfigError, match=message):
    harness.evaluate_checkpoint('/no/such/ckpt', None, names, mode, limit, 0, data_dir, 0, str(out))
  assert not out.exists()


def test_max_new_tokens_replaces_the_per_task_cap(ckpt, data, monkeypatch):
  """--max_new_tokens=96 lets a multiple-choice answer run past 32 tokens
  (a choice's text, then its letter), as it lets a GSM8K one stop at 6."""
  loaded = restore.load(ckpt)
  questions = harness.questions_of(['arc_easy'], data_dir=data)['arc_easy'][:1]
  steps = []
  record = lambda model, params, prompts, n, **kw: steps.append(n) or [[]] * len(prompts)
  monkeypatch.setattr(generation, 'generate', record)
  for cap in (0, 6, 96):
    harness.generate_responses(loaded, questions, max_new_tokens=cap, batch=1)
  assert steps == [harness.MAX_NEW_TOKENS[tasks.MC], 6, 96]


def test_generate_batches_as_one_prompt_at_a_time(ckpt, data):
  """Batched, bucket-padded greedy decoding gives each question the response
  it gets alone; answers are read from those responses."""
  loaded = restore.load(ckpt)
  questions = harness.questions_of(['arc_easy', 'gsm8k'], data_dir=data)
  mixed = questions['arc_easy'][:3] + questions['gsm8k']
  got = harness.generate_responses(loaded, mixed, max_new_tokens=6, batch=4)
  tok, render = loaded.tokenizer, harness.renderer(loaded)
  for q, response in zip(mixed, got):
    prompt = [tok.bos_id, *tok.encode(render.prompt([dict(role='user', content=q.prompt)]))]
    alone = generation.generate(loaded.model, loaded.params, [prompt], 6, eos_id=tok.eos_id,
                                pad_id=tok.pad_id, length=256)[0]   # one shape: one compile
    assert response == tok.decode(alone)
  result, = harness.run(loaded, {'gsm8k': questions['gsm8k']}, 'generate', max_new_tokens=6)
  assert (result['n'], result['metric'], result['correct']) == (2, 'pass@1', 0)


def test_letter_counts_tell_a_constant_answer_from_knowledge():
  mc = lambda i, gold: tasks.Question(id=str(i), context='', choices=('w', 'x', 'y', 'z'),
                                      gold='ABCD'.index(gold), prompt='', answer=gold, kind=tasks.MC)
  qs = [mc(0, 'B'), mc(1, 'A'), mc(2, 'B'), mc(3, 'D'),
        tasks.Question(id='n', context='', choices=(), gold=-1, prompt='', answer='4',
                       kind=tasks.NUMBER)]
  got = harness.letter_counts(qs, ['B.', 'B) x', 'The answer is B', 'no idea', '4'])
  assert got == dict(letters={'-': 1, 'B': 3}, gold_letters={'A': 1, 'B': 2, 'D': 1},
                     choice_text=dict(written=0, right=0, letter_agrees=0))
  assert harness.letter_counts(qs[4:], ['4']) == {}
  # choice_letter answers: the right text with a wrong letter, the right text
  # with its own letter, a wrong text, and no choice's text.
  got = harness.letter_counts(qs[:4], ['x\nThe answer is C.', 'w\nThe answer is A.',
                                       'z.\nThe answer is B.', 'maybe y\nThe answer is C.'])
  assert got['letters'] == {'A': 1, 'B': 1, 'C': 2}
  assert got['choice_text'] == dict(written=3, right=2, letter_agrees=1)
