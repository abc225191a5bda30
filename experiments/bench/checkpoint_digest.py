"""What checkpoint digests cost next to the save and restore they guard.

  python -m experiments.bench.checkpoint_digest --mib=1024 --out=digest.json

Builds a state-like tree (params + two AdamW moments: 3 x MiB/3 of float32 in
leaves of [E, D, F] and [D, V] shapes), then times, in one run and on one
device set: an Orbax save of it without digests (the plain
`ocp.CheckpointManager` the Manager wraps), `digest.of_tree` (what
`Manager.save` adds), an Orbax restore, and the digest check a restore adds
(`digest.check_tree`). Compile time is excluded (one warm-up call); each is
the median of --reps. Reports seconds and the ratios digest/save and
check/restore, with jax/jaxlib versions and the device.
"""
import argparse
import datetime
import json
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import jaxlib
import orbax.checkpoint as ocp

from experiments import provenance
from moe_jax.workdir import digest


def _tree(mib):
  """params-like leaves totalling about mib / 3 MiB, three times (params, mu, nu)."""
  per_copy = mib * 2**20 // 3 // 4   # float32 elements
  e, d, f = 8, 512, 1024
  layers = max(1, per_copy // (3 * e * d * f))
  key = jax.random.key(0)
  params = {f'layers_{i}': {n: jax.random.normal(jax.random.fold_in(key, 3 * i + j), (e, d, f))
                            for j, n in enumerate(('wi_0', 'wi_1', 'wo'))}
            for i in range(layers)}
  return {'params': params, 'mu': jax.tree_util.tree_map(jnp.zeros_like, params),
          'nu': jax.tree_util.tree_map(lambda x: x * x, params)}


def _median(fn, reps):
  times = []
  for _ in range(reps):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--mib', type=int, default=1024, help='state size in MiB')
  parser.add_argument('--reps', type=int, default=3)
  parser.add_argument('--out', help='also write the JSON here')
  args = parser.parse_args()
  tree = _tree(args.mib)
  nbytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(tree))
  with tempfile.TemporaryDirectory() as root:
    options = ocp.CheckpointManagerOptions(enable_async_checkpointing=False, max_to_keep=1)
    manager = ocp.CheckpointManager(os.path.join(root, 'ckpt'), options=options)
    step = iter(range(10**6))

    def save():
      manager.save(next(step), args=ocp.args.StandardSave(tree), force=True)

    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, tree)

    def restore():
      jax.block_until_ready(manager.restore(manager.latest_step(),
                                            args=ocp.args.StandardRestore(abstract)))

    recorded = digest.of_tree(tree)
    check = lambda: digest.check_tree('bench', 'state', tree, recorded)
    save()   # warm-up: first-call costs out of the timings
    restore()
    times = dict(save=_median(save, args.reps), digest=_median(lambda: digest.of_tree(tree),
                                                                args.reps),
                 restore=_median(restore, args.reps), check=_median(check, args.reps))
    manager.close()
  result = dict(
      date=datetime.date.today().isoformat(), jax=jax.__version__, jaxlib=jaxlib.__version__,
      device=str(jax.devices()[0].device_kind), devices=jax.device_count(), state_bytes=nbytes,
      leaves=len(jax.tree_util.tree_leaves(tree)), seconds=times,
      digest_over_save=times['digest'] / times['save'],
      check_over_restore=times['check'] / times['restore'],
      digest_gb_per_s=nbytes / times['digest'] / 1e9)
  print(json.dumps(result, indent=1))
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(dict(result, provenance=provenance.record()), f, indent=1)


if __name__ == '__main__':
  main()
