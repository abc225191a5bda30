"""run.json: what a run is, in numbers a tool can read without the model code.

The trainer writes it at start (and the upcycle CLI into its --dst), so that
`scaling_laws collect` and other readers need neither this package's model
code nor the config schema of the version that wrote the run:

  tokens_per_step  batch_size * seq_len;  seq_len, total_steps
  upcycle_step     the in-run transition step tau (0: none)
  model            the model trained from step 0 (summary() below)
  grown            the model after tau, or null
  source           the checkpoint this run started from (init_from, or the
                   upcycle CLI's --src): its path, step, tokens trained to that
                   step and its model summary where the source has a run.json
  devices          the devices a training run uses (null in the upcycle CLI's
                   --dst): measured step times are per this many devices
Its history (the chain of checkpoints it grew from) is lineage.json's.
"""
import os

from moe_jax.models import accounting, config as model_config
from moe_jax.workdir import checkpoint, files

FORMAT = 1


def summary(config):
  """Parameter counts (seed 002 eqs. 4-6) and forward FLOPs per token of
  config's model. `dense_nonembed` is N1: the dense counterpart's (experts
  removed) active non-embedding parameters. `d_ff` (the dense MLP's
  width), `expert_d_ff` (a routed expert's) and `num_shared_experts` tell a
  fine-grained or shared-expert MoE."""
  cfg = model_config.from_config(config)
  dense = config.copy_and_resolve_references()
  dense.moe.num_experts = 0
  c = accounting.counts(cfg)
  return dict(
      num_experts=config.moe.num_experts, top_k=config.moe.top_k,
      d_ff=cfg.d_ff, expert_d_ff=cfg.moe.d_ff, num_shared_experts=cfg.moe.num_shared_experts,
      params=c.total, params_active=c.active, nonembed=c.total_nonembed,
      nonembed_active=c.active_nonembed,
      dense_nonembed=accounting.counts(
          model_config.from_config(dense)).active_nonembed,
      flops_per_token=accounting.forward_flops_per_token(cfg, config.seq_len))


def source_info(ckpt):
  """Where a run started from: the checkpoint at `ckpt` (a workdir means its
  newest step) and, from its workdir's run.json, the tokens and model behind it."""
  directory, step = checkpoint.resolve(ckpt)
  if step is None:
    manager = checkpoint.Manager(directory, async_save=False, read_only=True)
    step = manager.latest_step()
    manager.close()
  info = dict(checkpoint=os.path.join(directory, str(step)), step=step)
  path = os.path.join(os.path.dirname(directory), files.RUN)
  if step is not None and os.path.exists(path):
    run = files.read_json(path)
    tau = run.get('upcycle_step') or 0
    info.update(tokens=step * run['tokens_per_step'],
                model=run['grown'] if tau and step >= tau else run['model'])
  return info


def build(config, grown_config=None, source=None, devices=None):
  """The run.json record of a run of `config` (grown into `grown_config` at
  upcycle.step, if any), started from `source` (source_info(), or None), on
  `devices` devices."""
  return dict(
      format=FORMAT, tokens_per_step=config.batch_size * config.seq_len,
      seq_len=config.seq_len, total_steps=config.total_steps,
      upcycle_step=config.upcycle.step, model=summary(config),
      grown=summary(grown_config) if grown_config is not None else None, source=source,
      devices=devices)


def write(workdir, record):
  files.write_json(os.path.join(workdir, files.RUN), record)


def read_source(workdir):
  """The `source` of an existing run.json in `workdir`, or None."""
  path = os.path.join(workdir, files.RUN)
  return files.read_json(path).get('source') if os.path.exists(path) else None
