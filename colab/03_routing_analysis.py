# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Routing analysis: expert load over training, and which tokens go where
#
# **Question.** How does an 8-expert, top-2 router spread its load while it
# trains (load per expert over steps, its coefficient of variation, dead
# experts), and does it route by token type? Seed 001 (sparse upcycling,
# `001_21ea8fdce747c085.txt`, its `analyze_token_routing`) looks at which tokens
# go to which expert; here the token types are spaces, newlines, punctuation,
# letters of the 20 most frequent words, and other letters.
#
# The run is `configs/arms.py:fixed2x` (E=8, top-2, selection-only router
# bias for balance, byte-level Shakespeare). The load statistics come from the
# trainer's `metrics.jsonl`; the token routing from the router's top-k on
# validation batches of the final checkpoint (`moe_jax.eval.restore.load`,
# `moe_jax.models.router.select`).
#
# **Defaults and run time.** `STEPS=200` of 16×128 tokens: a few minutes on a
# Colab CPU runtime, under a minute on a GPU runtime (estimates; colab/README.md
# has the time measured on this project's CPU machine).

# %%
# Where moe_jax comes from. Opened from a checkout (this notebook in its
# colab/ folder: a local clone, or one copied to a mounted Google Drive), the
# checkout is used as it is. Opened alone (uploaded to Colab), set REPO_URL to
# a copy of moe_jax you trust (a git URL pip accepts) or install it yourself.
REPO_URL = ''  # <- SET ME only when this notebook is not inside a moe_jax checkout
import os
import subprocess
import sys

_here = os.path.abspath(os.getcwd())
_places = [_here] + [os.path.dirname(_here)] + [
    os.path.join(d, 'moe_jax') for d in ('/content', '/content/drive/MyDrive')]
ROOT = next((d for d in _places if os.path.isfile(os.path.join(d, 'setup.py')) and
             os.path.isdir(os.path.join(d, 'moe_jax', 'train'))), None)
if ROOT:
  if 'google.colab' in sys.modules:   # Colab lacks some dependencies: install the checkout
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '-e', ROOT], check=True)
  sys.path.insert(0, ROOT)
  os.chdir(ROOT)   # configs/ and experiments/ paths are relative to the checkout
elif REPO_URL:
  subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', f'git+{REPO_URL}'], check=True)
else:
  try:
    import moe_jax  # pylint: disable=unused-import
  except ImportError:
    raise RuntimeError(f'no moe_jax checkout in {_here} or its parent, in /content or on Drive, '
                       'and moe_jax is not installed: open this notebook from a checkout, or '
                       'set REPO_URL in this cell') from None

# %% tags=["parameters"]
STEPS = 200
LAYERS = 2
BATCH = 16
SEQ = 128
ANALYSIS_BATCHES = 8   # validation batches for the token-type analysis
WORKDIR = '/tmp/moe_jax_colab/03_routing_analysis'

# %%
import collections
import json
import re
import shutil
import string

import jax
import matplotlib.pyplot as plt
import numpy as np

from configs import arms
from experiments import report
from moe_jax.data import pipeline
from moe_jax.eval import restore
from moe_jax.models import router
from moe_jax.train import trainer

shutil.rmtree(WORKDIR, ignore_errors=True)   # this notebook's own scratch directory
config = arms.get_config(f'fixed2x,steps={STEPS},layers={LAYERS},batch={BATCH},seq={SEQ}')
last = trainer.train_and_evaluate(config, WORKDIR + '/run')
(run,) = report.load_runs(WORKDIR)
E = config.moe.num_experts
moe_layers = sorted({k.split('/')[1] for m in run['metrics'] for k in m
                     if k.startswith('moe/') and k.endswith('/load')})
print(f'val_loss {last["val_loss"]:.4f}; MoE layers {moe_layers}')

# %% [markdown]
# ## Expert load over training
# Each column is one logged step's batch: the fraction of top-2 assignments
# each expert received (1/E = 0.125 is perfect balance). Below, the load's
# coefficient of variation (0 is balanced) and the experts that got nothing.

# %%
rows = [m for m in run['metrics'] if f'moe/{moe_layers[0]}/load' in m]
steps = [m['step'] for m in rows]
fig, axes = plt.subplots(1, len(moe_layers), figsize=(6 * len(moe_layers), 3), squeeze=False)
for ax, layer in zip(axes[0], moe_layers):
  load_ES = np.array([m[f'moe/{layer}/load'] for m in rows]).T
  im = ax.imshow(load_ES, aspect='auto', cmap='viridis', vmin=0,
                 extent=(steps[0], steps[-1], E - 0.5, -0.5))
  ax.set(title=f'{layer}: load per expert', xlabel='step', ylabel='expert')
  fig.colorbar(im, ax=ax)
fig.tight_layout()
plt.show()

fig, (cv_ax, dead_ax) = plt.subplots(1, 2, figsize=(12, 3))
for layer in moe_layers:
  cv_ax.plot(steps, [m[f'moe/{layer}/cv'] for m in rows], label=layer)
  dead_ax.plot(steps, [m[f'moe/{layer}/dead'] for m in rows], label=layer)
cv_ax.set(xlabel='step', ylabel='load CV (std / mean of expert loads)',
          title='load imbalance per MoE layer')
dead_ax.set(xlabel='step', ylabel='dead experts in the batch', title='experts given no token')
cv_ax.legend()
fig.tight_layout()
plt.show()
cv = float(np.mean([rows[-1][f'moe/{l}/cv'] for l in moe_layers]))
dead = int(sum(rows[-1][f'moe/{l}/dead'] for l in moe_layers))
print(f'last logged step {steps[-1]}: mean load CV {cv:.3f}, dead experts {dead}')

# %% [markdown]
# ## Which token types go to which expert
# The router's top-2 on validation batches, per token type: each row is the
# share of that type's assignments going to each expert (uniform: 1/E). With
# top-2 one expert's share is at most 0.5: every token of the type picks it.

# %%
loaded = restore.load(WORKDIR + '/run')
tok, m = loaded.tokenizer, loaded.config.moe
batches = pipeline.eval_batches(loaded.config, tok)[:ANALYSIS_BATCHES]


@jax.jit
def router_logits(params, batch):
  _, state = loaded.model.apply(
      {'params': params}, batch['inputs'], segment_ids=batch['segment_ids'],
      positions=batch['positions'], capture_intermediates=lambda mdl, _: isinstance(
          mdl, router.Router), mutable=['intermediates'])
  return {layer: state['intermediates'][layer]['moe']['router']['__call__'][0]
          for layer in moe_layers}


pieces, idx = [], collections.defaultdict(list)   # per token: its text, and its experts
for batch in batches:
  out = router_logits(loaded.params, batch)
  for layer, (logits_BLE, bias_E) in out.items():
    idx_BLk, _, _ = router.select(logits_BLE, bias_E, m.top_k, m.score, m.order, m.renormalize)
    idx[layer].append(np.asarray(idx_BLk)[batch['segment_ids'] > 0])
  for row, seg in zip(batch['inputs'], batch['segment_ids']):
    pieces.append([tok.decode([int(t)]) for t, s in zip(row, seg) if s > 0])

words = collections.Counter(w for p in pieces for w in re.findall(r'[A-Za-z]+', ''.join(p)))
frequent = {w for w, _ in words.most_common(20)}


def token_types(piece_list):
  """The type of each token, by its text and the word it lies in."""
  text, starts = '', []
  for p in piece_list:
    starts.append(len(text))
    text += p
  in_frequent = np.zeros(len(text) + 1, bool)
  for w in re.finditer(r'[A-Za-z]+', text):
    in_frequent[w.start():w.end()] = w.group() in frequent
  out = []
  for p, s in zip(piece_list, starts):
    c = p[:1]
    if c == '\n':
      out.append('newline')
    elif c.isspace():
      out.append('space')
    elif c and c in string.punctuation:
      out.append('punctuation')
    elif c.isalpha():
      out.append('frequent word' if in_frequent[s] else 'other letters')
    else:
      out.append('other')
  return out


types = np.array([t for p in pieces for t in token_types(p)])
TYPES = [t for t in ('space', 'newline', 'punctuation', 'frequent word', 'other letters', 'other')
         if (types == t).any()]
fig, axes = plt.subplots(1, len(moe_layers), figsize=(6 * len(moe_layers), 3), squeeze=False)
for ax, layer in zip(axes[0], moe_layers):
  idx_Tk = np.concatenate(idx[layer])
  share_CE = np.array([np.bincount(idx_Tk[types == t].ravel(), minlength=E) for t in TYPES], float)
  share_CE /= share_CE.sum(1, keepdims=True)
  im = ax.imshow(share_CE, cmap='magma', vmin=0)
  ax.set(title=f'{layer}: P(expert | token type)', xlabel='expert', ylabel='token type',
         yticks=range(len(TYPES)), yticklabels=TYPES)
  fig.colorbar(im, ax=ax)
  for t, row in zip(TYPES, share_CE):
    print(f'{layer} {t:14s} top expert {row.argmax()} takes {row.max():.2f} '
          f'of its assignments (uniform {1 / E:.3f})')
fig.tight_layout()
plt.show()
print('frequent words:', ' '.join(sorted(frequent)))

# %%
token_share = {t: float((types == t).mean()) for t in TYPES}
print(json.dumps(dict(num_experts=E, cv=cv, dead=dead, token_share=token_share,
                      val_loss=float(last['val_loss']))))
