# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Expert upcycling quickstart: Fixed-E vs Upcycled E→2E vs Fixed-2E
#
# **Question.** At one token budget, does a model that trains E=4 experts until
# step tau and then duplicates them to 2E=8 (seed 000, Definition 3.1; the
# in-run `expand_experts` transition) end closer to Fixed-2E or to Fixed-E?
# Seed 000 eq. 4 measures it:
# eta = (L(Fixed-E) − L(Upcycled)) / (L(Fixed-E) − L(Fixed-2E)).
#
# The three runs are `configs/arms.py:{fixed,upcycled,fixed2x}` (byte-level
# Shakespeare, 2 layers, d_model 96, top-2, tau = steps/2).
#
# **Defaults and run time.** `STEPS=200` trains three runs of 200 steps of
# 16×128 tokens: a few minutes on a Colab CPU runtime (2 cores), about a
# minute on a GPU runtime, much of it compiling (estimates; colab/README.md
# has the time measured on this project's CPU machine). `experiments.quickstart`
# runs the same comparison over 3 seeds at 1500 steps from the command line.

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
STEPS = 200      # steps of every run; the upcycled run grows at STEPS/2
LAYERS = 2
BATCH = 16       # sequences per step
SEQ = 128        # tokens per sequence
WORKDIR = '/tmp/moe_jax_colab/01_upcycle_quickstart'

# %%
import json
import os
import shutil

import matplotlib.pyplot as plt

from configs import arms
from experiments import report
from moe_jax.scaling_laws import cost
from moe_jax.train import trainer

shutil.rmtree(WORKDIR, ignore_errors=True)   # this notebook's own scratch directory
RUNS = ('fixed', 'upcycled', 'fixed2x')
SIZE = f'steps={STEPS},layers={LAYERS},batch={BATCH},seq={SEQ}'
configs = {name: arms.get_config(f'{name},{SIZE}') for name in RUNS}
for name, config in configs.items():
  print(f'{name:10s} {arms.describe(config)}')

# %% [markdown]
# ## Train the three runs
# `train_and_evaluate` is the trainer the CLI runs; the upcycled run grows at
# step tau in memory and writes `upcycle_report.json` (validation loss just
# before and after the transition).

# %%
final = {}
for name, config in configs.items():
  final[name] = trainer.train_and_evaluate(config, os.path.join(WORKDIR, name))
runs = {r['name']: r for r in report.load_runs(WORKDIR)}

# %% [markdown]
# ## Loss curves, tau marked

# %%
tau = configs['upcycled'].upcycle.step
fig, (ax, zoom) = plt.subplots(1, 2, figsize=(12, 4))
for name in RUNS:
  rows = runs[name]['metrics']
  train = [(m['step'], m['loss']) for m in rows if 'loss' in m]
  val = [(m['step'], m['val_loss']) for m in rows if 'val_loss' in m]
  for a in (ax, zoom):
    line, = a.plot(*zip(*train), lw=1, label=f'{name} (train)')
    a.plot(*zip(*val), 'o--', color=line.get_color(), ms=4, label=f'{name} (val)')
for a in (ax, zoom):
  a.axvline(tau, color='k', ls=':', lw=1)
  a.set(xlabel='step', ylabel='loss (nats/byte)')
ax.set(yscale='log', ylabel='loss (nats/byte, log scale)',
       title='training (lines) and validation (dots) loss, whole run')
zoom.set(xlim=(tau * 0.8, STEPS), title=f'zoomed from step {int(tau * 0.8)}; tau = {tau} dotted')
zoom.set_ylim(min(v['val_loss'] for v in final.values()) - 0.1,
              max(v['val_loss'] for v in final.values()) + 0.3)
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

up = runs['upcycled']['upcycle']
print(f'at tau: validation loss {up["loss_before"]:.4f} -> {up["loss_after"]:.4f} '
      f'(max |delta logits| {up["max_abs_dlogits"]:.3g}: copies tie in the top-k)')

# %% [markdown]
# ## Upcycling efficiency (seed 000 eq. 4)
# eta is defined only when Fixed-2E beat Fixed-E: eq. 4 divides by that gap.
# At small budgets it often has not, and then the notebook says so instead of
# printing a ratio of noise.

# %%
loss = {name: float(final[name]['val_loss']) for name in RUNS}
gap = loss['fixed'] - loss['fixed2x']
eta = cost.efficiency(loss['fixed'], loss['upcycled'], loss['fixed2x']) if gap > 0 else None
for name in RUNS:
  print(f'{name:10s} val_loss {loss[name]:.4f}')
print(f'unigram entropy of the validation split: {final["fixed"]["val_unigram_entropy"]:.4f}')
if eta is None:
  print(f'eta undefined: Fixed-2E did not beat Fixed-E (gap {gap:+.4f}); train longer')
else:
  print(f'eta = {eta:.3f}  (1: matches Fixed-2E, 0: no better than Fixed-E; '
        f'gap {gap:.4f} nats)')
  if gap < 0.01:
    print('the gap is under 0.01 nats, within one seed\'s noise at this size: eta is not '
          'meaningful here')
print(json.dumps(dict(val_loss=loss, gap=gap, eta=eta)))
