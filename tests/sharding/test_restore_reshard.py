"""A checkpoint written on 8 devices continues on a 4-device mesh of another
shape: Orbax lays each array out as the restore target's sharding says."""
import json
import os
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp

from moe_jax import sharding
from moe_jax.train import trainer
from tests.train import tiny


def run_config(**mesh):
  c = tiny.config(total_steps=3, eval_every_steps=0, checkpoint_every_steps=2,
                  **{'model.num_layers': 1})
  c.mesh.update(mesh)
  return c


def losses(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return {row['step']: row['loss'] for row in map(json.loads, f)}


def test_eight_device_checkpoint_continues_on_four(tmp_path):
  eight, four = str(tmp_path / 'eight'), str(tmp_path / 'four')
  trainer.train_and_evaluate(run_config(data=2, expert=4), eight)
  # `four` is the 8-device run as it stood after its step-2 checkpoint.
  shutil.copytree(eight, four)
  shutil.rmtree(os.path.join(four, 'checkpoints', '3'))

  trainer.train_and_evaluate(run_config(num_devices=4, data=1, fsdp=2, expert=2), four)
  want, got = losses(eight), losses(four)
  assert sorted(got) == sorted(want) == [1, 2, 3]
  np.testing.assert_allclose(got[3], want[3], rtol=0, atol=1e-5)

  # Its new checkpoint was written from arrays on the 4-device mesh.
  path = os.path.join(four, 'checkpoints', '3', 'params')
  tree = ocp.StandardCheckpointer().metadata(path).item_metadata
  tree = getattr(tree, 'tree', tree)
  layouts = {sharding.path_str(k): (tuple(v.sharding.shape), tuple(v.sharding.partition_spec))
             for k, v in jax.tree_util.tree_leaves_with_path(tree)}
  assert layouts['layers_0/moe/experts/wi_0'] == ((1, 2, 2, 1), ('expert', 'fsdp', None))
  assert layouts['lm_head'] == ((1, 2, 2, 1), ('fsdp', None))
