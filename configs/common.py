"""Shared config pieces: every config file starts from `base()`.

Each key has one home. Groups:
  model  transformer shape (defaults: moe_jax/models/config.py; presets: models/presets.py)
  moe    experts, router, balancing, dispatch, layer pattern (defaults: models/config.py)
  opt    optimizer and learning-rate schedule
  data   corpus, tokenizer, packing
  ckpt   Orbax checkpointing
  mesh   device mesh and sharding
  upcycle  in-run transition at step `upcycle.step` (0 = none)
  phases   per-phase LR and router-loss multipliers (seed 001's three-phase CPT)
"""
import ml_collections

from moe_jax.models import config as model_config


def parse_arg(arg, **defaults):
  """Parses 'a=1,b=x,flag' (or '' / None) against typed defaults.

  A bare word is a boolean flag set to True, or, if `size` is a default and the
  word is not a known key, the value of `size` (so `:tiny` and `:10layer` work).
  """
  out = ml_collections.ConfigDict(defaults)
  for item in filter(None, (arg or '').split(',')):
    key, eq, value = item.partition('=')
    if not eq:
      if key in defaults and isinstance(defaults[key], bool):
        out[key] = True
        continue
      if 'size' in defaults:
        out.size = key
        continue
      raise ValueError(f'config argument {key!r} is not one of {sorted(defaults)}')
    if key not in defaults:
      raise ValueError(f'config argument {key!r} is not one of {sorted(defaults)}')
    kind = type(defaults[key])
    out[key] = (value.lower() in ('1', 'true', 'yes')) if kind is bool else kind(value)
  return out


def model():
  """A CPU-sized Llama-style decoder (the `tiny` preset). Each key's default
  and meaning has one home: ModelConfig in moe_jax/models/config.py."""
  return ml_collections.ConfigDict(model_config.defaults(model_config.ModelConfig))


def moe():
  """MoE block settings; num_experts=0 makes every layer dense. Each key's
  default and meaning has one home: MoEConfig in moe_jax/models/config.py."""
  return ml_collections.ConfigDict(model_config.defaults(model_config.MoEConfig))


def opt():
  return ml_collections.ConfigDict(dict(
      name='adamw',
      lr=3e-3,
      b1=0.9,
      b2=0.95,
      eps=1e-8,
      weight_decay=0.1,
      clip_norm=1.0,
      schedule='wsd',        # wsd | cosine | constant
      warmup_steps=50,
      decay_fraction=0.2,    # wsd: share of steps in the final decay
      decay_shape='linear',  # wsd: linear | cosine | sqrt
      final_lr_fraction=0.0,
      rewarm_steps=0,        # a second warmup after an in-run upcycle transition
      mu_dtype='',           # Adam's first moment: '' (as params) | float32 | bfloat16
      router_lr_multiplier=1.0,   # the routers' weights learn at this times the LR
  ))


def data():
  return ml_collections.ConfigDict(dict(
      source='shakespeare',  # shakespeare | text_files | sft | prepared (moe_jax/data/sources.py)
      patterns='',           # text_files, sft: comma-separated glob patterns
      path='',               # prepared: the --out of moe_jax.data.prepare
      encoding='',           # text_files: '' detects each file's (moe_jax/data/corpus.py)
      chat_template='model',  # sft: the tokenizer's own (model) | plain (moe_jax/data/chat.py)
      tokenizer='byte',      # byte | bpe
      bpe_vocab_size=4096,
      tokenizer_path='',     # bpe: an existing tokenizer.json
      val_fraction=0.05,     # share of documents held out for validation
      split_seed=0,          # picks the validation documents (independent of `seed`)
      part='',               # '' every training document | pretrain | cpt: two disjoint
      cpt_fraction=0.5,      #   parts by document, cpt_fraction of them for CPT (corpus.py)
      worker_count=0,        # grain workers; 0: in-process
  ))


def ckpt():
  return ml_collections.ConfigDict(dict(
      keep=2,                # newest N checkpoints
      keep_every=0,          # and every K-th step for good (0: none)
      async_save=True,
  ))


def mesh():
  return ml_collections.ConfigDict(dict(
      data=-1, fsdp=1, expert=1, tensor=1,   # -1: the remaining devices
      num_devices=0,         # the first N devices only (0: all); one-process runs
      distributed=False,     # call jax.distributed.initialize() (SLURM, MPI, TPU detect the rest)
      coordinator_address='',  # 'HOST:PORT' of process 0; with num_processes and process_id
      num_processes=0,       #   names a multi-process run (moe_jax.multiprocess sets all three)
      process_id=-1,
      rules='',              # logical->mesh overrides: 'embed=fsdp+tensor,vocab='
  ))


def upcycle():
  """Growing a model: in-run at step `step` (the trainer), or between checkpoints
  (python -m moe_jax.upcycle). The target config is the source config with
  the recipe's own change (its `target` in moe_jax/upcycle/recipes/: experts
  x factor for expand_experts, ...) and then `target`'s overrides (nested
  groups, e.g. target.moe.num_experts for dense_to_moe)."""
  return ml_collections.ConfigDict(dict(
      step=0,                # in-run transition step tau (0: none)
      recipe='',             # a recipe of moe_jax/upcycle/recipes/ (dense_to_moe, ...)
      factor=2,              # expansion factor m (experts, or depth)
      split_bias=False,      # expand_experts: router biases x 1/m (its args.split_bias)
      args=ml_collections.ConfigDict(),    # recipe options: its file in moe_jax/upcycle/recipes/
      target=ml_collections.ConfigDict(),  # overrides of the target config
      utility_metric='grad_norm',          # args.allocation=utility: grad_norm | saliency |
      utility_batches=64,                  #   weight_norm | curvature, over this many batches
                                           #   (curvature needs many: moe_jax/upcycle/utility.py)
      report_batches=4,      # validation batches for the function-preservation report: two
                             #   forward passes each (SmolLM2-135M's whole upcycle at 4, batch
                             #   8 x 512: 7 min of CPU, docs/interop.md; laptop minutes)
      seed=0,                # noise and fresh inits of the transform
      source='',             # provenance: the checkpoint this run was upcycled from
  ))


# Seed 001's three-phase continued pre-training: warmup, specialization, refinement.
SEED001_PHASES = dict(fractions=(0.05, 0.70, 0.25), lr=(0.1, 1.0, 0.1), balance=(5.0, 1.0, 0.5),
                      z_loss=(2.0, 1.0, 0.5))


def phases():
  """Training phases (moe_jax/train/phases.py): the steps after upcycle.step split
  by `fractions`; in phase i opt's LR is scaled by lr[i] and the balance and
  z-loss weights by balance[i] and z_loss[i]. Seed 001's three-phase CPT is
  SEED001_PHASES (`config.phases.update(SEED001_PHASES)`). Empty fractions: one
  phase, nothing scaled."""
  return ml_collections.ConfigDict(dict(fractions=(), lr=(), balance=(), z_loss=()))


def expand_args(allocation=None, delta=None, expert=None, router=None, layout=None,
                utility_allocation=None):
  """`upcycle.args` of recipe expand_experts (seed 000 Definition 3.1); None
  takes the recipe's default (moe_jax/upcycle/recipes/expand_experts.py).

  `delta` is the U(-delta, delta) noise on the replicas' router biases (the
  seed's default; needs moe.use_bias). `expert_args` and `router_args` hold
  every option of the chosen Table 9 / Table 10 heuristic (or `random`, Table
  4's Kaiming baseline) with its default, so each variant of Tables 11-12 is a
  command-line override: `expert=copy_noise` and then
  `--config.upcycle.args.expert_args.lam=0.05`.
  """
  from moe_jax.upcycle import heuristics, recipes  # pylint: disable=g-import-not-at-top
  d = recipes.defaults('expand_experts')
  pick = lambda value, key: d[key] if value is None else value
  expert, router = pick(expert, 'expert_heuristic'), pick(router, 'router_heuristic')
  return ml_collections.ConfigDict(dict(
      allocation=pick(allocation, 'allocation'), layout=pick(layout, 'layout'),
      utility_allocation=pick(utility_allocation, 'utility_allocation'),
      delta=pick(delta, 'delta'),
      expert_heuristic=expert,
      expert_args=heuristics.options('expert', expert, {}),
      router_heuristic=router,
      router_args=heuristics.options('router', router, {})))


def base():
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.total_steps = 300
  config.batch_size = 16
  config.seq_len = 128
  # Microbatches per step, one optimizer update (train/step.py); 0: auto (on CPU
  # cache-sized ones where they give the same step with no extra pass, else 1:
  # train/accumulate.py).
  config.grad_accum_steps = 0
  config.log_every_steps = 10
  config.eval_every_steps = 100
  config.eval_batches = 8
  config.checkpoint_every_steps = 100
  config.init_from = ''      # CKPT: start from another checkpoint's params
  config.model = model()
  config.moe = moe()
  config.opt = opt()
  config.data = data()
  config.ckpt = ckpt()
  config.mesh = mesh()
  config.upcycle = upcycle()
  config.phases = phases()
  return config


def apply_preset(config, name):
  """Sets `config.model` and `config.moe` to a named preset (moe_jax/models/presets.py)."""
  from moe_jax.models import presets  # pylint: disable=g-import-not-at-top
  presets.apply(config, name)
