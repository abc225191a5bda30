r"""Branch-Train-MiX at CPU scale: three dense branches of one base, each
trained on its own domain, merged into one MoE (configs/upcycle/merge.py)
and trained on the union; against each branch on its own domain and a dense
model trained on the union for the same tokens.

  python -m experiments.merge.domains --dir=/tmp/domains
  python -m experiments.launch --config=experiments/merge/config.py:data=/tmp/domains \
      --workdir=/tmp/merge
  python -m experiments.merge.report --workdir=/tmp/merge --data=/tmp/domains

Runs (one seed; `small` shrinks every step count for CI):

  base               dense, from scratch on the union, `base_steps`
  dense_<domain>     base trained on one domain only, `branch_steps`
  merged_<router>    the three branches merged (one expert each, top-1, so
                     as many active params as a dense model), router
                     random | domain (`routers`, '+'-separated), trained on
                     the union, `union_steps`
  dense_union        base trained on the union for 3 x branch_steps +
                     union_steps: the branches' and the merged run's tokens

Domains and their fixed train / validation files: experiments/merge/domains.py.
The model: 2 layers, d_model 64, 4 heads (2 KV), d_ff 256, byte tokens,
batch 8 x 128; AdamW at the repo defaults, each run with its own warmup and
WSD schedule over its own steps.
"""
import os

from configs import common
from experiments.merge import domains

MERGE = 'configs/upcycle/merge.py'
ROUTERS = ('random', 'domain')


def _arg(arg):
  words = [w for w in str(arg or '').split(',') if w]
  small = 'small' in words
  words = [w for w in words if w != 'small']
  return common.parse_arg(','.join(words), data='', base_steps=4 if small else 50,
                          branch_steps=2 if small else 50, union_steps=2 if small else 50,
                          routers='random+domain', small=small)


def patterns(data, *names):
  """data.patterns of the training files of `names` (every domain: the union)."""
  return ','.join(os.path.join(data, d, 'train', '*.txt') for d in names or domains.DOMAINS)


def get_config(arg=None):
  arg = _arg(arg)
  config = common.base()
  config.model.update(d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                      d_ff=256)
  config.moe.num_experts = 0
  config.data.update(source='text_files', patterns=patterns(os.path.abspath(arg.data)))
  config.update(total_steps=arg.base_steps, batch_size=4 if arg.small else 8,
                seq_len=32 if arg.small else 128, eval_batches=2, log_every_steps=10,
                eval_every_steps=arg.base_steps, checkpoint_every_steps=arg.base_steps)
  config.opt.warmup_steps = 1 if arg.small else 5
  config.ckpt.update(async_save=False, keep=100)   # the merged runs' step 0 stays for the report
  if arg.small:
    config.log_every_steps = 1
  return config


def get_hyper(h, arg=None):
  arg = _arg(arg)
  data = os.path.abspath(arg.data)

  def run(name, steps, **keys):
    keys = {'config.total_steps': steps, 'config.eval_every_steps': steps,
            'config.checkpoint_every_steps': steps, **keys}
    return h.product([h.fixed('name', name), *[h.fixed(k, v) for k, v in keys.items()]])

  points = [run('base', arg.base_steps)]
  for d in domains.DOMAINS:
    points.append(run(f'dense_{d}', arg.branch_steps, **{
        'config.init_from': h.run('base'), 'config.data.patterns': patterns(data, d)}))
  branches = ','.join(h.run(f'dense_{d}') for d in domains.DOMAINS)
  for router in arg.routers.split('+'):
    if router not in ROUTERS:
      raise ValueError(f'routers={arg.routers!r}: {router!r} is not one of {ROUTERS}')
    points.append(run(f'merged_{router}', arg.union_steps, **{
        'upcycle.config': f'{MERGE}:per_source=1,top_k=1,router={router},batches=4,steps=200',
        'upcycle.src': branches, 'config.moe.num_experts': len(domains.DOMAINS),
        'config.moe.top_k': 1, 'config.moe.renormalize': True, 'config.moe.use_bias': False}))
  points.append(run('dense_union', 3 * arg.branch_steps + arg.union_steps,
                    **{'config.init_from': h.run('base')}))
  return h.chainit(points)
