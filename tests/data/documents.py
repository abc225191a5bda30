"""A small corpus of text files for the `text_files` source's tests."""
import numpy as np


def write(root, vocabulary):
  """doc00.txt ... doc11.txt in `root` (a pathlib.Path), document i
  'Document i.' and 30 + 9 i words drawn from `vocabulary` (seeded: the
  same files every time), UTF-8."""
  rng = np.random.default_rng(0)
  for i in range(12):
    words = rng.choice(vocabulary, size=30 + 9 * i)
    (root / f'doc{i:02d}.txt').write_text(f'Document {i}. ' + ' '.join(words), encoding='utf-8')
  return root
