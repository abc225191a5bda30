"""Reading the answer out of a generated response (generate mode, pass@1).

* multiple choice: the letter after the last "the answer is" / "Answer:",
  else a leading letter ("B", "B.", "(B)", "B) ..."), else a response whose
  first line is exactly one choice's text; otherwise no answer (wrong).
* GSM8K: the number after the last "The answer is", else the last number in
  the response; compared as numbers with the gold (commas and $ dropped).
* MATH-500: the last \\boxed{...}, else what follows the last "answer is";
  compared with the gold after a light normalisation (spaces, $, \\left /
  \\right, \\! and "\\," dropped, dfrac / tfrac as frac, a trailing period
  gone, a degree sign gone), or as numbers when both parse as numbers. It is a
  simplified version of the Minerva normalisation: equivalent but differently
  written expressions (0.5 vs \\frac{1}{2}) count as wrong.
"""
import re

from moe_jax.data import prompts
from moe_jax.eval import tasks

_NUMBER = re.compile(r'-?\$?\d[\d,]*(?:\.\d+)?')
_ANSWER_IS = re.compile(r'answer is[:\s]*', re.IGNORECASE)


def letter(response, choices):
  """The chosen letter, or None."""
  letters = prompts.LETTERS[:len(choices)]
  text = response.strip()
  # "The answer is B" first: a response that writes the choice's text before
  # its letter may start with a word like "A" or "I".
  said = re.findall(rf'(?:answer is|answer:)\s*\(?([{letters}])\b', text, re.IGNORECASE)
  if said:
    return said[-1].upper()
  match = re.match(rf'\(?([{letters}])(?:[\s.):,]|$)', text)
  if match:
    return match.group(1)
  i = written_choice(text, choices)
  return None if i is None else letters[i]


def written_choice(response, choices):
  """The index of the choice whose text is the response's first line (case
  and a final period aside), or None. A response in sft_mix's choice_letter
  form writes its choice before naming a letter: this reads the choice it
  wrote, which can differ from the letter it names."""
  lines = response.strip().split('\n')
  bare = lines[0].rstrip('.').strip().lower()
  for i, choice in enumerate(choices):
    if bare == choice.strip().rstrip('.').lower():
      return i
  return None


def _to_float(text):
  try:
    return float(text.replace(',', '').replace('$', '').rstrip('.'))
  except ValueError:
    return None


def number(response):
  """The final number of a GSM8K response, or None."""
  parts = _ANSWER_IS.split(response)
  after = _NUMBER.findall(parts[-1]) if len(parts) > 1 else []
  if after:
    return _to_float(after[0])
  found = _NUMBER.findall(response)
  return _to_float(found[-1]) if found else None


def normalize_math(text):
  text = text.strip().strip('$').strip()
  for old, new in (('\\left', ''), ('\\right', ''), ('\\!', ''), ('\\,', ''), ('dfrac', 'frac'),
                   ('tfrac', 'frac'), ('^{\\circ}', ''), ('^\\circ', ''), ('\\%', ''),
                   ('$', ''), (' ', '')):
    text = text.replace(old, new)
  return text.rstrip('.')


def math_answer(response):
  """The final answer of a MATH response, or None."""
  boxed = tasks.last_boxed(response)
  if boxed is not None:
    return boxed
  parts = _ANSWER_IS.split(response)
  return parts[-1].strip().split('\n')[0] if len(parts) > 1 else None


def correct(question, response):
  """Whether `response` answers `question` right."""
  if question.kind == tasks.MC:
    return letter(response, question.choices) == question.answer
  if question.kind == tasks.NUMBER:
    got, want = number(response), _to_float(question.answer)
    return got is not None and want is not None and abs(got - want) < 1e-6
  got = math_answer(response)
  if got is None:
    return False
  got, want = normalize_math(got), normalize_math(question.answer)
  as_numbers = _to_float(got), _to_float(want)
  if None not in as_numbers:
    return abs(as_numbers[0] - as_numbers[1]) < 1e-6
  return got == want
