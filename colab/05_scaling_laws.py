# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Upcycling scaling laws, D*, the cost model, and "should I upcycle?"
#
# **Question.** Given runs of upcycled models, which law fits them (seed 002
# eq. 12, with and without its D1·D2 interaction), up to what token budget D*
# does upcycling a dense model beat training a MoE from scratch (eq. 13), what
# does expert upcycling save in device-hours (seed 000 eqs. 1–2), and, for
# your own dense model and budget, which way should you go?
#
# Everything here is `moe_jax.scaling_laws` (the same functions as `python -m
# moe_jax.scaling_laws fit|dstar|cost`). `RUNS_TABLE` is your runs table (CSV
# or JSON lines, columns `N1, D1, D2, loss`; `scaling_laws collect` builds one
# from workdirs); left empty, the notebook draws 48 synthetic runs from seed
# 002 Table 2's upcycled law with `NOISE` relative noise, so the fit should
# recover Table 2.
#
# **Defaults and run time.** No training: under a minute on any Colab runtime
# (the leave-one-out refits take most of it).

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
RUNS_TABLE = ''       # your runs (CSV / JSONL); '' draws synthetic ones from Table 2
NOISE = 0.003         # relative noise of the synthetic losses
N1_GRID = [3e8, 1e9, 3e9, 1e10, 3e10, 1e11]   # dense sizes for the D* curve
# "Should I upcycle?": your dense model, the tokens it was trained on (sunk),
# and the FLOPs you can still spend.
MY_N1 = 1e9
MY_D1 = 2e10
MY_BUDGET = 1e20

# %%
import json
import os
import tempfile

import numpy as np
from IPython.display import Image, display

from moe_jax.scaling_laws import cost, dstar, fit, forms, optimal, plots, presets, table

OUT = tempfile.mkdtemp(prefix='moe_jax_laws_')
TABLE2 = {name: dict(p['params']) for name, p in presets.PRESETS.items()}
if RUNS_TABLE:
  cols = table.load(RUNS_TABLE)
  cols = table.select(cols, 'upcycled') if 'kind' in cols else cols
else:
  grid = np.meshgrid([1e8, 3e8, 1e9], [1e9, 6e9, 4e10, 2.5e11], [1e9, 6e9, 4e10, 2.5e11],
                     indexing='ij')
  cols = dict(zip(('N1', 'D1', 'D2'), (g.ravel() for g in grid)))
  clean = forms.predict(forms.get('joint'), TABLE2['table2_upcycled'], cols)
  cols['loss'] = clean * np.exp(np.random.default_rng(0).normal(0, NOISE, clean.shape))
print(f'{len(cols["loss"])} runs, loss {cols["loss"].min():.3f} .. {cols["loss"].max():.3f}')

# %% [markdown]
# ## Fit eq. 12, with and without the interaction term; leave-one-out RMS
# Seed 002 picks a form by its leave-one-out RMS error (Table 1).

# %%
joint = forms.get('joint')
fits = {'joint': fit.fit(joint, cols), 'joint, alpha3 = 0': fit.fit(joint, cols, fixed={'alpha3': 0.0})}
loo = {name: fit.loo_rms(joint, cols, f) for name, f in fits.items()}
for name, f in fits.items():
  shown = ', '.join(f'{k}={v:.4g}' for k, v in f.params.items())
  print(f'{name:18s} LOO-RMS {loo[name]:.5f} nats   {shown}')
print('Table 2 (upcycled): ' + ', '.join(f'{k}={v:.4g}' for k, v in TABLE2['table2_upcycled'].items()))
best = min(loo, key=loo.get)
upcycled = fits['joint'].params
plots.fit_curves(joint, upcycled, cols, os.path.join(OUT, 'fit.png'))
display(Image(os.path.join(OUT, 'fit.png')))

# %% [markdown]
# ## D*: up to which token budget does upcycling win? (eq. 13 vs eq. 2)
# The MoE-from-scratch law is Table 2's (a runs table of MoE runs would fit it
# with `fit.fit(forms.get('chinchilla'), ...)`); the upcycled law is the fit
# above. Below D*, upcycling a dense model of N1 parameters (D1 = D2 = D) beats
# a MoE trained from scratch on D tokens.

# %%
moe = TABLE2['table2_moe']
d_star = [(dstar.solve(moe, upcycled, n1) or [np.nan])[0] for n1 in N1_GRID]
for n1, d in zip(N1_GRID, d_star):
  print(f'N1 = {n1:.0e}: D* = {d / 1e9:8.2f}B tokens (eq. 13)   eq. 2: {dstar.eq2(n1) / 1e9:8.2f}B')
plots.dstar_curve(N1_GRID, d_star, dstar.eq2(N1_GRID), os.path.join(OUT, 'dstar.png'))
display(Image(os.path.join(OUT, 'dstar.png')))

# %% [markdown]
# ## What expert upcycling costs (seed 000 eqs. 1–2)
# Seed 000 Fig. 2's setting: 32 → 64 experts, 567k steps on 64 GPUs at 2.1 s
# and 4.1 s a step. Upcycling at tau saves tau·(s_2E − s_E); if the E-expert
# checkpoint already exists, only the steps after tau are spent.

# %%
fig2 = cost.upcycling_cost(2.1, 4.1, 567_000, 378_000, devices=64)
print(', '.join(f'{k} {v:.2f}' if 'fraction' in k or '_over_' in k else f'{k} {v:,.0f} h'
                for k, v in fig2.items()))
taus = np.linspace(0, 1, 21)
curve = [cost.upcycling_cost(2.1, 4.1, 567_000, f * 567_000, devices=64) for f in taus]
import matplotlib   # pylint: disable=g-import-not-at-top
matplotlib.use('Agg')   # plots.* above chose Agg; draw to a file and show it
import matplotlib.pyplot as plt   # pylint: disable=g-import-not-at-top
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(taus, [c['C_up'] for c in curve], label='upcycled (C_up)')
ax.plot(taus, [c['C_up_sunk'] for c in curve], label='upcycled, E checkpoint sunk')
ax.axhline(fig2['C_fs'], color='k', ls='--', lw=1, label='Fixed-2E from scratch')
ax.axhline(fig2['C_fixed_E'], color='gray', ls=':', lw=1, label='Fixed-E')
ax.set(xlabel='tau / T (transition step over total steps)', ylabel='GPU hours',
       title="seed 000's cost model (eqs. 1-2) against tau")
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(os.path.join(OUT, 'cost.png'), dpi=100)
display(Image(os.path.join(OUT, 'cost.png')))

# %% [markdown]
# ## Should I upcycle?
# You have a dense model of `MY_N1` non-embedding parameters trained on
# `MY_D1` tokens (already paid for) and `MY_BUDGET` FLOPs to spend. An 8-expert
# top-2 MoE built from it has N2 = 1.75·N1 active parameters (seed 002
# eqs. 4–5), so the budget buys D = C / (6·N2) tokens. Upcycle it and train D2 = D
# tokens, or train the same MoE from scratch on those D tokens? The answer uses
# the fitted upcycled law and Table 2's MoE law; the compute-optimal split of the
# budget between model size and tokens is eq. 14 (`optimal.closed_form`).

# %%
tokens = MY_BUDGET / (6 * optimal.MIXTRAL_N2_OVER_N1 * MY_N1)
point = {'N1': np.array([MY_N1]), 'D1': np.array([MY_D1]), 'D2': np.array([tokens])}
loss_up = float(forms.predict(joint, upcycled, point)[0])
loss_moe = float(forms.predict(forms.get('chinchilla'), moe,
                               {'N1': np.array([MY_N1]), 'D1': np.array([tokens])})[0])
answer = 'upcycle' if loss_up < loss_moe else 'train from scratch'
my_dstar = (dstar.solve(moe, upcycled, MY_N1) or [None])[0]
print(f'budget buys {tokens / 1e9:.2f}B tokens for the 8x top-2 MoE of N1 = {MY_N1:.0e}')
print(f'predicted loss: upcycled (D1 = {MY_D1:.1e} sunk) {loss_up:.4f}, from scratch {loss_moe:.4f}')
print(f'D* at this N1: ' + (f'{my_dstar / 1e9:.2f}B tokens' if my_dstar else 'no crossing'))
opt = optimal.closed_form(upcycled, MY_D1, MY_BUDGET)
print(f'compute-optimal for this budget (eq. 14): N1 = {opt["N1_opt"]:.3g}, D2 = {opt["D2_opt"]:.3g}, '
      f'loss {opt["loss"]:.4f}')
print(f'answer: {answer}')
print(json.dumps(dict(best_by_loo=best, loo_rms=loo['joint'], answer=answer,
                      loss_upcycled=loss_up, loss_scratch=loss_moe, d_star=d_star)))
