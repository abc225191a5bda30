"""A lineage record (workdir/lineage.py) as a table: one row per stage, the
chain in one line, and the Markdown a model card embeds. Reads the stages'
metrics.jsonl for their last val_loss; JSON only (no JAX).

  table = lineage_table.rows(record, step)
  print(lineage_table.chain(table)); lineage_table.markdown(record, step)
"""
from moe_jax.model_name import describe
from moe_jax.workdir import files


def _how(s):
  o = s.get('origin')
  if not o:
    return 'unknown'
  parent = o.get('parent') or {}
  recipe = o.get('recipe') or '?'
  if o.get('factor'):   # recorded by recipes that grow by upcycle.factor
    recipe += f' x{o.get("factor")}'
  return {
      'scratch': lambda: f'scratch, seed {o.get("seed")}',
      'init_from': lambda: f'fine-tune (init_from {parent.get("checkpoint")})',
      'upcycle': lambda: f'upcycle CLI {recipe} of ' + ' + '.join(
          str(p.get('checkpoint')) for p in o.get('parents') or [parent]),
      'in_run': lambda: f'in-run {recipe} at step {parent.get("step")}',
      'hf_import': lambda: f'import {parent.get("hf")}',
  }.get(o['how'], lambda: o['how'])()


def rows(record, step=None):
  """One dict per stage, root first: steps, tokens trained there and in all
  (None: unknown), parameter counts, how it began (with the loss before and
  after a growth) and the last val_loss it logged. `step` ends the last stage
  (default: where the record says, else its start)."""
  out = []
  stages = record['stages']
  for i, s in enumerate(stages):
    end = s['end_step'] if s['end_step'] is not None else (
        step if step is not None and i == len(stages) - 1 else s['start_step'])
    known = None not in (s['tokens_before'], s['tokens_per_step'])
    tokens = (end - s['start_step']) * s['tokens_per_step'] if s['tokens_per_step'] else None
    report = (s.get('origin') or {}).get('report') or {}
    model = s.get('model') or {}
    # A val_loss logged at tau in-run is the grown model's: it belongs to the next stage.
    in_run = i + 1 < len(stages) and stages[i + 1]['workdir'] == s['workdir']
    out.append(dict(
        stage=i, workdir=s['workdir'], start_step=s['start_step'], end_step=end,
        tokens=tokens, tokens_total=s['tokens_before'] + tokens if known else None,
        model=describe(model), params=model.get('params'), active=model.get('params_active'),
        how=_how(s), origin=(s.get('origin') or {}).get('how'),
        loss_before=report.get('loss_before'), loss_after=report.get('loss_after'),
        max_abs_dlogits=report.get('max_abs_dlogits'),
        val_loss=files.last_val_loss(s['workdir'], s['start_step'], end - in_run)[1]))
  return out


def num(x, digits=3):
  """1.23M, 456K, 789; '?' for None (parameter and token counts)."""
  if x is None:
    return '?'
  for unit, scale in (('T', 1e12), ('B', 1e9), ('M', 1e6), ('K', 1e3)):
    if abs(x) >= scale:
      return f'{x / scale:.{digits}g}{unit}'
  return f'{x:.{digits}g}'


def chain(table):
  """'dense 35.2K -> MoE 4x top-2 85.3K at step 2 -> fine-tune from step 30'
  from rows(): a growth names the model it made; a fine-tune (init_from: the
  same model trained on, fresh optimizer) is a stage of its own, not a growth."""
  parts = []
  for r in table:
    at = '' if not r['stage'] else f' at step {table[r["stage"] - 1]["end_step"]}'
    if r.get('origin') == 'init_from' and r['stage']:
      parts.append(f'fine-tune from step {table[r["stage"] - 1]["end_step"]}')
    else:
      parts.append(f'{r["model"]} {num(r["params"])}{at}')
  return ' -> '.join(parts)


COLUMNS = (('stage', 'stage'), ('model', 'model'), ('params', 'params'), ('active', 'active'),
           ('steps', 'steps'), ('tokens', 'tokens'), ('tokens_total', 'total tokens'),
           ('loss', 'loss at growth'), ('val_loss', 'val_loss at end'), ('how', 'how'),
           ('workdir', 'workdir'))


def cells(r):
  """The printed cells of one rows() entry, keyed like COLUMNS."""
  loss = ('' if r['loss_before'] is None else
          f'{r["loss_before"]:.4f} -> {r["loss_after"]:.4f}')
  return dict(stage=str(r['stage']), model=r['model'], params=num(r['params']),
              active=num(r['active']), steps=f'{r["start_step"]}-{r["end_step"]}',
              tokens=num(r['tokens']), tokens_total=num(r['tokens_total']), loss=loss,
              val_loss='' if r['val_loss'] is None else f'{r["val_loss"]:.4f}',
              how=r['how'], workdir=r['workdir'])


def markdown(record, step=None):
  """The chain as a Markdown section (for a model card)."""
  table = rows(record, step)
  lines = ['## Lineage', '', chain(table), '',
           '| ' + ' | '.join(title for _, title in COLUMNS) + ' |',
           '|' + '---|' * len(COLUMNS)]
  lines += ['| ' + ' | '.join(cells(r)[key] for key, _ in COLUMNS) + ' |' for r in table]
  return '\n'.join(lines) + '\n'
