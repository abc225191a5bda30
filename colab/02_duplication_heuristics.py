# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Which experts to duplicate? Utility-based vs uniform vs random (seed 000 §5.3.2)
#
# **Question.** When an E=4 MoE grows to 2E=8 experts (top-2 kept), seed 000
# §5.3.2 gives the extra copies to the experts with the highest utility
# (‖g‖², ‖w‖·‖g‖, ‖w‖², or the Fisher-normalised ‖g‖²/H; §4.2, Table 4)
# instead of one copy each. Does that beat uniform duplication, and do copies
# beat freshly initialised (Kaiming) new experts, after the same continued
# pre-training (CPT)?
#
# One source run (`configs/arms.py:fixed`) is grown six ways by the
# upcycle API (`moe_jax.upcycle.run.upcycle_checkpoint`, what `python -m
# moe_jax.upcycle` runs), and each grown model trains `CPT_STEPS` more steps
# with a fresh optimizer:
#
# | variant | allocation | new experts |
# |---|---|---|
# | `uniform` | one extra copy of each expert | copies |
# | `grad_norm`, `saliency`, `weight_norm`, `curvature` | greedy by utility (‖g‖², ‖w‖·‖g‖, ‖w‖², ‖g‖²/H) | copies |
# | `random` | one per expert | Kaiming-initialised (drop-upcycling with drop = 1) |
#
# **Defaults and run time.** `STEPS=100`, `CPT_STEPS=60` at 16×128 tokens a
# step: several minutes on a Colab CPU runtime, 1–2 minutes on a GPU runtime
# (estimates; colab/README.md has the time measured on this project's CPU
# machine).
# At this scale the differences are small and one seed does not separate them;
# the notebook shows the machinery and the replica counts, more steps and seeds
# are needed for a finding (seed 000 reports differences of ~1e-3 nats).

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
STEPS = 100           # source run (E=4)
CPT_STEPS = 60        # continued pre-training of each grown model (2E=8)
LAYERS = 2
BATCH = 16
SEQ = 128
UTILITY_BATCHES = 8   # training batches the utility gradients average over
WORKDIR = '/tmp/moe_jax_colab/02_duplication_heuristics'

# %%
import json
import os
import shutil

import matplotlib.pyplot as plt
import numpy as np

from configs import arms
from configs.upcycle import expand_experts
from experiments import report
from moe_jax.train import trainer
from moe_jax.upcycle import run as upcycle_run

shutil.rmtree(WORKDIR, ignore_errors=True)   # this notebook's own scratch directory
SIZE = f'layers={LAYERS},batch={BATCH},seq={SEQ}'
source = os.path.join(WORKDIR, 'source')
src_last = trainer.train_and_evaluate(arms.get_config(f'fixed,steps={STEPS},{SIZE}'), source)
print(f'source (E=4, {STEPS} steps): val_loss {src_last["val_loss"]:.4f}')

# %% [markdown]
# ## Grow the source six ways
# `configs/upcycle/expand_experts.py` builds each upcycle config; the utility
# variants write their per-expert scores and replica counts to
# `upcycle_scores.json` in the grown workdir.

# %%
METRICS = ('grad_norm', 'saliency', 'weight_norm', 'curvature')
variants = {'uniform': expand_experts.get_config('allocation=uniform')}
for metric in METRICS:
  variants[metric] = expand_experts.get_config(
      f'allocation=utility,metric={metric},batches={UTILITY_BATCHES}')
variants['random'] = expand_experts.get_config('expert=drop_upcycle')
variants['random'].args.expert_args = dict(drop=1.0, init='kaiming')

jump, scores = {}, {}
for name, up in variants.items():
  r = upcycle_run.upcycle_checkpoint(up, source, os.path.join(WORKDIR, name))
  jump[name] = r['loss_after'] - r['loss_before']
  path = os.path.join(WORKDIR, name, 'upcycle_scores.json')
  if os.path.exists(path):
    with open(path) as f:
      scores[name] = json.load(f)['layers']
  print(f'{name:12s} loss at the transition {r["loss_before"]:.4f} -> {r["loss_after"]:.4f}')

# %% [markdown]
# ## Per-expert utility and the replica counts it chose
# Bars: each expert's utility, normalised to sum to 1 within the layer; the
# number on a bar is its replica count (uniform gives 2 each).

# %%
layers = sorted(next(iter(scores.values())))
fig, axes = plt.subplots(len(METRICS), len(layers), figsize=(4 * len(layers), 2.2 * len(METRICS)),
                         squeeze=False)
counts = {}
for i, metric in enumerate(METRICS):
  counts[metric] = {}
  for j, layer in enumerate(layers):
    s = np.array(scores[metric][layer]['scores'])
    c = scores[metric][layer]['counts']
    counts[metric][layer] = c
    ax = axes[i, j]
    bars = ax.bar(range(len(s)), s / max(s.sum(), 1e-30))
    ax.bar_label(bars, labels=[f'×{n}' for n in c], fontsize=8)
    ax.set(title=f'{metric} · {layer}', xticks=range(len(s)), ylim=(0, 1))
    ax.title.set_fontsize(9)
fig.supxlabel('source expert')
fig.supylabel("share of the layer's utility (xN: its replicas)")
fig.suptitle('utility scores and replica counts per metric and layer')
fig.tight_layout()
plt.show()
for metric in METRICS:
  print(f'{metric:12s}', '  '.join(f'{l}: {counts[metric][l]}' for l in layers))

# %% [markdown]
# ## Continued pre-training of each grown model

# %%
final = {}
for name in variants:
  config = arms.get_config(f'fixed2x,steps={CPT_STEPS},{SIZE}')
  final[name] = trainer.train_and_evaluate(config, os.path.join(WORKDIR, name))
runs = {r['name']: r for r in report.load_runs(WORKDIR)}

fig, (curves, bars) = plt.subplots(1, 2, figsize=(12, 4))
for name in variants:
  rows = runs[name]['metrics']
  curves.plot([m['step'] for m in rows if 'loss' in m], [m['loss'] for m in rows if 'loss' in m],
              lw=1, label=name)
curves.axhline(float(src_last['val_loss']), color='k', ls=':', lw=1, label='source val_loss')
curves.set(xlabel='CPT step', ylabel='training loss (nats/byte, log scale)', yscale='log',
           title='continued pre-training')
curves.legend(fontsize=7)
loss = {name: float(final[name]['val_loss']) for name in variants}
bars.bar(list(loss), list(loss))
bars.set(ylim=(min(loss.values()) - 0.05, max(loss.values()) + 0.05),
         xlabel='how the new experts were chosen', ylabel='validation loss (nats/byte)',
         title='validation loss after CPT (zoomed)')
bars.tick_params(axis='x', rotation=30)
fig.tight_layout()
plt.show()

# %%
best = min(loss, key=loss.get)
for name in variants:
  print(f'{name:12s} jump at growth {jump[name]:+.4f}   val_loss after CPT {loss[name]:.4f}'
        f'   ({loss[name] - loss["uniform"]:+.4f} vs uniform)')
print(f'lowest: {best}; one seed, so differences below the run-to-run noise mean nothing')
print(json.dumps(dict(val_loss=loss, jump=jump, counts=counts)))
