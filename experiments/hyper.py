"""The sweep vocabulary: a config file's `get_hyper(hyper)` is written in it.

As in scenic and vmoe, a sweep is a list of points and a point is a dict from
a key to a value; the functions below build such lists:

  def get_hyper(h):
    return h.product([
        h.sweep('config.moe.num_experts', [4, 8]),
        h.sweep('config.seed', [0, 1]),
    ])

is four points, (4, 0), (4, 1), (8, 0), (8, 1): the last factor varies fastest.
A key `config.<path>` is a training-config key, passed to the run as
`--config.<path>=<value>`; the launcher's own keys are

  name            the run's directory name (default: made from the keys that vary)
  resume_from     `run(PARENT, step=S)`: the run goes on from PARENT's state at step
                  S (params, optimizer state, data position) under its own config,
                  e.g. a WSD decay branch that starts at S with total_steps = S + D
  upcycle.config  grow the run before training it: the --config of
                  `python -m moe_jax.upcycle` (e.g. 'configs/upcycle/dense_to_moe.py:experts=4')
  upcycle.src     ... and its --src, usually `run(PARENT, step=S)`; several configs
                  joined by ' + ' grow one after the other (e.g. depth, then experts)
  eval.args       after training, `python -m moe_jax.evaluate --ckpt=RUN <args>
                  --out=RUN/benchmarks.<i>.jsonl` for each of the ' ; '-separated
                  argument strings (e.g. '--tasks=arc_easy --mode=loglik --limit=100')
  eval.ckpt       evaluate this checkpoint instead, and train nothing (a baseline)

(`config.init_from=run(PARENT, step=S)` instead starts a run at step 0 from
PARENT's params only, with a fresh optimizer and data stream.)

A string value may name another run of the same sweep as `{run:NAME}` (that
run's directory); the run then depends on NAME and starts after it finished.
`run(NAME, step=S)` is `{run:NAME}/checkpoints/S`, one checkpoint of it.
"""
import itertools

from moe_jax.errors import ConfigError

NAME, RESUME_FROM = 'name', 'resume_from'
UPCYCLE_CONFIG, UPCYCLE_SRC = 'upcycle.config', 'upcycle.src'
EVAL_ARGS, EVAL_CKPT = 'eval.args', 'eval.ckpt'
LAUNCHER_KEYS = (NAME, RESUME_FROM, UPCYCLE_CONFIG, UPCYCLE_SRC, EVAL_ARGS, EVAL_CKPT)
CHAIN, EVAL_SEP = ' + ', ' ; '


def sweep(key, values):
  """One point per value."""
  return [{key: v} for v in values]


def fixed(key, value, length=1):
  """`length` copies of one point: a constant inside `product`, a column in `zipit`."""
  return [{key: value} for _ in range(length)]


def product(sweeps):
  """Every combination, the last sweep varying fastest."""
  return [_merged(parts, 'product') for parts in itertools.product(*sweeps)]


def zipit(sweeps):
  """The i-th points of all sweeps merged; the sweeps must have one length."""
  lengths = [len(s) for s in sweeps]
  if len(set(lengths)) > 1:
    raise ConfigError(f'hyper.zipit: sweeps of different lengths {lengths}')
  return [_merged(parts, 'zipit') for parts in zip(*sweeps)]


def chainit(sweeps):
  """The points of one sweep after another."""
  return [dict(point) for s in sweeps for point in s]


def run(name, step=None):
  """Another run of the sweep (its workdir, i.e. its newest checkpoint), or its
  checkpoint at `step`; the run using it waits for that run."""
  return f'{{run:{name}}}' + ('' if step is None else f'/checkpoints/{int(step)}')


def _merged(parts, where):
  point = {}
  for part in parts:
    for key in part:
      if key in point:
        raise ConfigError(f'hyper.{where}: key {key!r} is set by two of its sweeps')
    point.update(part)
  return point
