"""Layer-wise weight norms (seed 003 Fig. 2 and App. B): a trained LM's norms
rise with depth and dip at the end; seed 003 argues depth growth should keep
that profile (interposition does, stacking repeats it).

  norms = layer_norms(params)   # {'layers_0': {'attn': ..., 'ffn': ..., ...}, ...}
  print(table({'base@1200': norms}))
  plot({'base@1200': norms, 'stack': norms2}, 'norms.png')

Per layer and group, the mean Frobenius norm of the group's weight matrices,
each expert's matrix counted as one matrix (so E does not scale the number):
  attn    q, k, v, o
  ffn     the dense MLP's wi_0, wi_1, wo; or the experts' and shared experts'
  router  the router weight (MoE layers only)
  norm    the attention and MLP RMSNorm scales (vectors: their L2 norm)
  weights attn and ffn matrices together: the layer's "average weight norm"
A pure function of the params pytree, so the trainer jits it and logs it at
its eval steps (`norms/layers_i/<group>` in metrics.jsonl).
"""
import io
import os
import re

import jax
import jax.numpy as jnp

from moe_jax import atomic

GROUPS = ('weights', 'attn', 'ffn', 'router', 'norm')
_LAYER = re.compile(r'layers_(\d+)')
_KIND = (('attn', re.compile(r'attn/(q|k|v|o)')),
         ('ffn', re.compile(r'(mlp|moe/experts|moe/shared)/(wi_0|wi_1|wo)')),
         ('router', re.compile(r'moe/router/w')),
         ('norm', re.compile(r'(attn_norm|mlp_norm)/scale')))


def _group(path):
  return next((name for name, pattern in _KIND if pattern.fullmatch(path)), None)


def layer_norms(params):
  """{layer: {group: mean matrix norm}} for every `layers_i` of `params`; a group
  a layer lacks (the router of a dense layer) is absent."""
  found = {}
  for key, layer in params.items():
    if not _LAYER.fullmatch(key):
      continue
    leaves = jax.tree_util.tree_flatten_with_path(layer)[0]
    per_group = {}
    for path, w in leaves:
      name = '/'.join(str(getattr(p, 'key', p)) for p in path)
      group = _group(name)
      if group is None:
        continue
      w = jnp.asarray(w, jnp.float32)
      # Experts: one norm per expert matrix, over all axes but the leading E.
      n = (jnp.sqrt(jnp.sum(w * w, axis=tuple(range(1, w.ndim)))) if 'moe/experts' in name
           else jnp.sqrt(jnp.sum(w * w))[None])
      per_group.setdefault(group, []).append(n)
    out = {g: jnp.mean(jnp.concatenate(v)) for g, v in per_group.items()}
    matrices = [n for g in ('attn', 'ffn') for n in per_group.get(g, [])]
    out['weights'] = jnp.mean(jnp.concatenate(matrices))
    found[key] = out
  return dict(sorted(found.items(), key=lambda kv: int(kv[0].split('_')[1])))


def flat(norms, prefix='norms'):
  """{'norms/layers_i/group': float}: metrics.jsonl keys."""
  return {f'{prefix}/{layer}/{g}': float(v) for layer, groups in norms.items()
          for g, v in groups.items()}


def table(norms_by_label):
  """Text table: one row per (label, layer), one column per group."""
  header = ['checkpoint', 'layer'] + list(GROUPS)
  rows = [[label, layer.split('_')[1]] + [
      f'{float(groups[g]):.3f}' if g in groups else '' for g in GROUPS]
      for label, norms in norms_by_label.items() for layer, groups in norms.items()]
  widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
  line = lambda cells: '  '.join(str(c).rjust(w) for c, w in zip(cells, widths))
  return '\n'.join([line(header)] + [line(r) for r in rows])


def plot(norms_by_label, path):
  """One panel per group, norm over layer index, one line per checkpoint. The
  PNG is written atomically (moe_jax/atomic.py)."""
  import matplotlib   # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt   # pylint: disable=g-import-not-at-top
  groups = [g for g in GROUPS if any(g in gs for n in norms_by_label.values() for gs in n.values())]
  fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.2), squeeze=False)
  for ax, g in zip(axes[0], groups):
    for label, norms in norms_by_label.items():
      xy = [(int(layer.split('_')[1]), float(gs[g])) for layer, gs in norms.items() if g in gs]
      if xy:
        ax.plot(*zip(*xy), 'o-', ms=3, label=label)
    ax.set(title=g, xlabel='layer')
  axes[0, 0].set_ylabel('mean matrix norm')
  axes[0, 0].legend(fontsize=7)
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png', dpi=110)
  plt.close(fig)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  atomic.write_bytes(path, buffer.getvalue())
  return path
