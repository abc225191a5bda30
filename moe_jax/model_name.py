"""A model's name in one phrase, from its run record's `model` dict: what the
lineage table, the planner and the run summary print. Pure and at the bottom
of the layers, so every part may name a model the same way."""


def describe(model):
  """'dense' or 'MoE 8x top-2', and for a fine-grained MoE (experts narrower
  than the dense MLP) or one with shared experts, 'MoE 32x top-8 (d_ff 64,
  4 shared)'. Records written before run_record kept those fields say neither."""
  if not model:
    return 'unknown'
  if not model['num_experts']:
    return 'dense'
  extra = []
  if model.get('expert_d_ff') and model['expert_d_ff'] != model.get('d_ff'):
    extra.append(f'd_ff {model["expert_d_ff"]}')
  if model.get('num_shared_experts'):
    extra.append(f'{model["num_shared_experts"]} shared')
  return (f'MoE {model["num_experts"]}x top-{model["top_k"]}'
          + (f' ({", ".join(extra)})' if extra else ''))
