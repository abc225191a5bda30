# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Growing a trained MoE deeper or wider (seed 003)
#
# **Question.** From one trained checkpoint, which growth keeps the function
# and which trains on best: depth growth by stacking (l1..ln, l1..ln) or by
# interposition (l1, l1, l2, l2, ...), or width growth (2E experts and 2k
# active, the new experts and router rows perturbed by alpha·sigma; seed 003
# §3.2)? Seed 003 finds interposition better than stacking for depth, and
# width growth exactly function-preserving at alpha = 0.
#
# The source is `configs/arms.py:fixed` (E=4, top-2) without its
# selection-only router bias (`moe.use_bias=False`), so the runs here train
# as they did when this notebook was measured. Each growth is
# `moe_jax.upcycle.run.upcycle_checkpoint` with a `configs/upcycle/` config,
# which also measures the loss before and after and max |delta logits| on
# validation batches. Each grown model then trains `CPT_STEPS` more steps, and
# so does the source itself (`continue`, from its params with a fresh
# optimizer, as the grown ones start).
#
# **Defaults and run time.** `STEPS=100`, `CPT_STEPS=60` at 16×128 tokens a
# step: several minutes on a Colab CPU runtime, 1–2 minutes on a GPU runtime
# (estimates; colab/README.md has the time measured on this project's CPU
# machine).

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
STEPS = 100       # source run
CPT_STEPS = 60    # training after growth
LAYERS = 2
BATCH = 16
SEQ = 128
WORKDIR = '/tmp/moe_jax_colab/04_growth'

# %%
import json
import os
import shutil

import matplotlib.pyplot as plt

from configs import arms
from configs.upcycle import grow_depth, grow_width
from experiments import report
from moe_jax.train import trainer
from moe_jax.upcycle import run as upcycle_run

shutil.rmtree(WORKDIR, ignore_errors=True)   # this notebook's own scratch directory
SIZE = f'layers={LAYERS},batch={BATCH},seq={SEQ}'
source = os.path.join(WORKDIR, 'source')
def config_of(steps):
  config = arms.get_config(f'fixed,steps={steps},{SIZE}')
  config.moe.use_bias = False
  return config


src_last = trainer.train_and_evaluate(config_of(STEPS), source)
print(f'source ({LAYERS} layers, E=4, top-2): val_loss {src_last["val_loss"]:.4f}')

# %% [markdown]
# ## Grow, and check function preservation
# `width_alpha0` is width growth without noise: it must compute the source's
# function (max |delta logits| at float32 rounding), with a selection bias too:
# each copy gets half its expert's softmax score and half its bias, so the
# top-2k of the copies are exactly the copies of the source's top-k.
# Depth growth adds layers, so it is not function-preserving; the loss jump
# says by how much.

# %%
growths = {
    'stack': grow_depth.get_config('method=stack'),
    'interpose': grow_depth.get_config('method=interpose'),
    'width_alpha0': grow_width.get_config('alpha=0'),
    'width': grow_width.get_config('alpha=0.01'),
}
reports = {}
for name, up in growths.items():
  r = upcycle_run.upcycle_checkpoint(up, source, os.path.join(WORKDIR, name))
  reports[name] = {k: r[k] for k in ('loss_before', 'loss_after', 'max_abs_dlogits')}
  print(f'{name:13s} loss {r["loss_before"]:.4f} -> {r["loss_after"]:.4f}   '
        f'max |delta logits| {r["max_abs_dlogits"]:.3g}')

fig, (jump_ax, diff_ax) = plt.subplots(1, 2, figsize=(11, 3.5))
jump_ax.bar(list(reports), [r['loss_after'] - r['loss_before'] for r in reports.values()])
jump_ax.set(xlabel='growth', ylabel='loss after - before (nats/byte)',
            title='loss jump at growth (0: function-preserving)')
diff_ax.bar(list(reports), [max(r['max_abs_dlogits'], 1e-12) for r in reports.values()])
diff_ax.set(yscale='log', xlabel='growth', ylabel='max |delta logits| (log scale)',
            title='largest change of any logit')
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Train on after growth
# The configs describe each grown model: twice the layers, or 2E experts with
# top-2k. `continue` is the source trained on from its params.

# %%
cpt = {name: config_of(CPT_STEPS) for name in ('continue', 'stack', 'interpose', 'width')}
cpt['continue'].init_from = source
for name in ('stack', 'interpose'):
  cpt[name].model.num_layers = 2 * LAYERS
cpt['width'].moe.update(num_experts=8, top_k=4)
final = {name: trainer.train_and_evaluate(c, os.path.join(WORKDIR, name)) for name, c in cpt.items()}
runs = {r['name']: r for r in report.load_runs(WORKDIR)}

fig, ax = plt.subplots(figsize=(7, 4))
for name in cpt:
  rows = runs[name]['metrics']
  line, = ax.plot([m['step'] for m in rows if 'loss' in m], [m['loss'] for m in rows if 'loss' in m],
                  lw=1, label=f'{name} (train)')
  ax.plot([m['step'] for m in rows if 'val_loss' in m],
          [m['val_loss'] for m in rows if 'val_loss' in m], 'o--', ms=4, color=line.get_color())
ax.axhline(float(src_last['val_loss']), color='k', ls=':', lw=1, label='source val_loss')
ax.set(xlabel='step after growth', ylabel='loss (nats/byte, log scale)', yscale='log',
       title='training (lines) and validation (dots) loss after growth')
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %%
loss = {name: float(final[name]['val_loss']) for name in cpt}
for name in cpt:
  print(f'{name:10s} val_loss after {CPT_STEPS} steps {loss[name]:.4f}   '
        f'({loss[name] - loss["continue"]:+.4f} vs continue)')
print(json.dumps(dict(report=reports, val_loss=loss)))
