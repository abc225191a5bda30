"""Routing analysis by token type (seed 001): which experts take which tokens.

For a checkpoint and the validation batches, every (token, top-k slot) pair
is counted under each token group the token belongs to. The groups overlap:
a character class from the token's text (whitespace, punctuation, digit,
capital, lower), its frequency in the analysed tokens (`frequent`: the most
common ids that together make half the tokens; `rare`: ids seen at most
RARE_COUNT times), and `speaker` for the tokens of a speaker-name line of the
plays ("**ROMEO**" in the bundled markdown plays, or "First Citizen:", alone on
its line). Per MoE layer the result is a
[group, expert] table of shares, the mutual information between the
character class and the expert (0: the router ignores the class), and the
layer's expert health as seed 001's monitor defines it (models/router.py
`health`: dead = under 1% of the load; healthy = load CV < 0.3 and every
expert above 2%).

Over training, `load_over_training` reads the per-step load CV, dead experts
(no token) and seed 001's health the trainer logs (metrics.jsonl,
moe_jax/train/step.py).
"""
import json
import os
import re

import jax
import numpy as np

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.eval import restore
from moe_jax.models import router
from moe_jax.workdir import files

CHAR_CLASSES = ('whitespace', 'punctuation', 'digit', 'capital', 'lower')
GROUPS = CHAR_CLASSES + ('frequent', 'rare', 'speaker')
RARE_COUNT = 2
# A speaker line: '**ROMEO**' (the bundled plays, markdown) or 'ROMEO:' (tiny-shakespeare).
_SPEAKER = re.compile(r'^(?:\*\*[A-Z][^*\n]*\*\*|[A-Z][A-Za-z\' ]*[A-Za-z]:)$', re.M)


def char_class(text):
  """The character class of a token's text (by its first non-space character)."""
  stripped = text.strip()
  if not stripped:
    return 'whitespace'
  c = stripped[0]
  if c.isdigit():
    return 'digit'
  if c.isalpha():
    return 'capital' if c.isupper() else 'lower'
  return 'punctuation'


def token_groups(tokens_BL, valid_BL, tok):
  """{group: bool [B, L]} for the valid tokens of `tokens_BL`."""
  ids, counts = np.unique(tokens_BL[valid_BL], return_counts=True)
  texts = {int(i): tok.decode([int(i)]) for i in ids}
  klass = np.vectorize(lambda i: char_class(texts.get(int(i), '')), otypes=[object])(tokens_BL)
  groups = {c: (klass == c) & valid_BL for c in CHAR_CLASSES}
  order = np.argsort(-counts, kind='stable')
  frequent = ids[order[:np.searchsorted(np.cumsum(counts[order]), counts.sum() / 2) + 1]]
  groups['frequent'] = np.isin(tokens_BL, frequent) & valid_BL
  groups['rare'] = np.isin(tokens_BL, ids[counts <= RARE_COUNT]) & valid_BL
  groups['speaker'] = np.zeros_like(valid_BL)
  for b, row in enumerate(tokens_BL):
    pieces = [texts.get(int(t), '') if v else '\n' for t, v in zip(row, valid_BL[b])]
    ends = np.cumsum([len(p) for p in pieces])
    for m in _SPEAKER.finditer(''.join(pieces)):
      # Tokens whose text overlaps the name and its colon.
      hit = (ends > m.start()) & (ends - [len(p) for p in pieces] < m.end())
      groups['speaker'][b] |= hit & valid_BL[b]
  return groups


def experts_of(model, params, batch):
  """{layer name: top-k expert ids [B, L, k]} of one batch, as the model routes
  it at evaluation (no jitter): the routing record each MoE block sows
  (moe_jax/models/routers/), whatever its router."""
  cfg = model.cfg
  _, state = model.apply({'params': params}, batch['inputs'], segment_ids=batch['segment_ids'],
                         positions=batch['positions'], mutable=['intermediates'])
  return {f'layers_{i}': state['intermediates'][f'layers_{i}']['moe']['routing'][0].idx_BLk
          for i in cfg.moe_layers}


def analyse(model, params, batches, tok):
  """dict(num_experts, tokens, layers={layer: dict(counts={group: [E]},
  share={group: [E]}, mi_bits, health)}) over `batches` (numpy feature dicts);
  health is `layer_health` of the layer's load over all valid tokens."""
  num_experts = model.cfg.moe.num_experts
  apply = jax.jit(lambda p, b: experts_of(model, p, b))
  counts, tokens = {}, 0
  for batch in batches:
    valid_BL = np.asarray(batch['segment_ids']) > 0
    groups = token_groups(np.asarray(batch['inputs']), valid_BL, tok)
    tokens += int(valid_BL.sum())
    for layer, idx_BLk in apply(params, batch).items():
      idx_BLk = np.asarray(idx_BLk)
      per = counts.setdefault(layer, {g: np.zeros(num_experts, np.int64) for g in
                                      ('all',) + GROUPS})
      per['all'] += np.bincount(idx_BLk[valid_BL].ravel(), minlength=num_experts)
      for g, mask in groups.items():
        per[g] += np.bincount(idx_BLk[mask].ravel(), minlength=num_experts)
  layers = {}
  for layer, per in counts.items():
    share = {g: (c / c.sum()).tolist() if c.sum() else None for g, c in per.items()}
    layers[layer] = dict(counts={g: c.tolist() for g, c in per.items()}, share=share,
                         mi_bits=mutual_information(np.stack([per[c] for c in CHAR_CLASSES])),
                         health=layer_health(per['all']))
  return dict(num_experts=num_experts, tokens=tokens, layers=layers)


def layer_health(counts_E):
  """router.health of assignment counts [E], as plain numbers for JSON."""
  counts_E = np.asarray(counts_E, np.float64)
  h = router.health(counts_E / max(counts_E.sum(), 1.0))
  return dict(cv=float(h['cv']), min_load=float(h['min_load']), max_load=float(h['max_load']),
              dead_1pct=int(h['dead_1pct']), healthy=bool(h['healthy']))


def health_line(h):
  return (f'health (seed 001): load CV {h["cv"]:.3f}, loads {100 * h["min_load"]:.1f}%-'
          f'{100 * h["max_load"]:.1f}%, {h["dead_1pct"]} dead (under 1%), '
          f'{"healthy" if h["healthy"] else "not healthy"}')


def mutual_information(counts_GE):
  """I(group; expert) in bits of a [group, expert] count table."""
  p = counts_GE / max(counts_GE.sum(), 1)
  outer = p.sum(1, keepdims=True) * p.sum(0, keepdims=True)
  nz = p > 0
  return float(np.sum(p[nz] * np.log2(p[nz] / outer[nz])))


def table(result):
  """Markdown: per layer, the expert shares of every group (percent of its
  top-k assignments), its count, and the layer's I(char class; expert)."""
  e = result['num_experts']
  lines = []
  for layer, r in result['layers'].items():
    lines += [f'{layer}: I(char class; expert) = {r["mi_bits"]:.3f} bits',
              health_line(r['health']), '',
              '| group | assignments | ' + ' | '.join(f'e{i}' for i in range(e)) + ' |',
              '|---|---:|' + '---:|' * e]
    for g in ('all',) + GROUPS:
      share = r['share'][g]
      cells = ['-'] * e if share is None else [f'{100 * s:.1f}' for s in share]
      lines.append(f'| {g} | {sum(r["counts"][g])} | ' + ' | '.join(cells) + ' |')
    lines.append('')
  return '\n'.join(lines)


def heatmap(result, path, title=''):
  """One panel per MoE layer: share of each group's assignments per expert,
  divided by the expert's share of all assignments (1 = no preference)."""
  import matplotlib   # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt   # pylint: disable=g-import-not-at-top
  layers = result['layers']
  fig, axes = plt.subplots(1, len(layers), figsize=(1.2 + 0.5 * result['num_experts'] * len(layers),
                                                   3.6), squeeze=False)
  for ax, (layer, r) in zip(axes[0], layers.items()):
    overall = np.maximum(np.asarray(r['share']['all']), 1e-9)
    lift = np.array([np.asarray(r['share'][g]) / overall if r['share'][g] is not None
                     else np.full_like(overall, np.nan) for g in GROUPS])
    im = ax.imshow(lift, cmap='RdBu_r', vmin=0, vmax=2, aspect='auto')
    ax.set(xticks=range(result['num_experts']), yticks=range(len(GROUPS)),
           yticklabels=GROUPS if ax is axes[0][0] else [], xlabel='expert',
           title=f'{layer} (MI {r["mi_bits"]:.2f} bits)')
    ax.title.set_fontsize(8)
  fig.colorbar(im, ax=axes[0].tolist(), label='share / overall share')
  if title:
    fig.suptitle(title, fontsize=9)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + '.tmp.png'
  fig.savefig(tmp, dpi=110)
  os.replace(tmp, path)
  plt.close(fig)
  return path


def load_over_training(workdir):
  """{layer: [(step, cv, dead, dead_1pct, healthy)]} from WORKDIR/metrics.jsonl
  (the logged steps; None where a run logged no such key)."""
  out = {}
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return out
  with open(path) as f:
    for line in f:
      row = json.loads(line)
      for key, value in row.items():
        if key.startswith('moe/') and key.endswith('/cv'):
          layer = key.split('/')[1]
          out.setdefault(layer, []).append((row['step'], value) + tuple(
              row.get(f'moe/{layer}/{k}') for k in ('dead', 'dead_1pct', 'healthy')))
  return out


def load_table(history, points=5):
  """Markdown: the load CV, dead experts (no token; under 1% of the load) and
  seed 001's healthy flag of each layer at `points` logged steps."""
  if not history:
    return '(no MoE metrics logged)'
  lines = ['| layer | step | load CV | dead experts | under 1% of the load | healthy |',
           '|---|---:|---:|---:|---:|---|']
  show = lambda v: '-' if v is None else int(v)
  for layer, rows in history.items():
    pick = sorted({round(i) for i in np.linspace(0, len(rows) - 1, min(points, len(rows)))})
    for i in pick:
      step, cv, dead, dead_1pct, healthy = rows[i]
      flag = '-' if healthy is None else ('yes' if healthy else 'no')
      lines.append(f'| {layer} | {step} | {cv:.3f} | {show(dead)} | {show(dead_1pct)} | {flag} |')
  return '\n'.join(lines)


def inspect_checkpoint(ckpt, batches=None, plot_path=''):
  """(markdown, plot path, result dict) of CKPT (`inspect --routing`): routing
  of `batches` validation batches (default: eval_batches), the load over
  training; writes the heatmap to `plot_path` and the result beside it as
  .json (nothing without a `plot_path`: the checkpoint is only read)."""
  if batches is not None and batches < 1:
    raise ConfigError(f'--batches={batches} must be positive')
  loaded = restore.load(ckpt)
  if not loaded.config.moe.num_experts:
    raise ConfigError(f'--ckpt={ckpt}: the model at step {loaded.step} has no MoE layer')
  config = loaded.config
  config.eval_batches = batches or config.eval_batches
  workdir = os.path.dirname(os.path.dirname(loaded.path))
  result = analyse(loaded.model, loaded.params, pipeline.eval_batches(config, loaded.tokenizer),
                   loaded.tokenizer)
  result['step'] = loaded.step
  history = load_over_training(workdir)
  result['load_over_training'] = history
  path = plot_path
  if path:
    heatmap(result, path, f'{os.path.basename(workdir)} @ step {loaded.step}')
    files.write_json(os.path.splitext(path)[0] + '.json', result)
  text = (f'routing of {loaded.path} over {result["tokens"]} validation tokens '
          f'(share of each group\'s top-k assignments per expert, %)\n\n'
          f'{table(result)}\nexpert load over training (metrics.jsonl)\n\n'
          f'{load_table(history)}')
  return text, path, result
