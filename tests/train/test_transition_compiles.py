"""The in-run transition compiles each of its programs once and nothing else:
a regression that adds one (an eager op between them, a program per leaf, a
key made outside the jit) fails here. The list is the one in
program_lib.upcycle's docstring, each with its reason."""
import ml_collections
import numpy as np

from experiments.bench import mesh_step
from moe_jax.train import program as program_lib
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint, placement
from tests import compiles
from tests.train import tiny

# The programs of a scanned model's transition with a report, in order:
_TRANSITION = [
    'unstack',       # the old train state into the checkpoint layout the growth reads
    'transform',     # the recipe's rules: the grown params, written into their shardings
    'compare',       # the preservation report: the forward before and after, on one batch
    'grown_state',   # the optimizer state by its policy, and the grown train layout
]


def test_the_transition_compiles_its_programs_once_and_a_save_only_its_layout(tmp_path):
  c = tiny.config(**{'model.scan_layers': True, 'model.vocab_size': 64})
  c.upcycle.update(step=3, recipe='expand_experts', factor=2)
  c.upcycle.args = ml_collections.ConfigDict(dict(delta=0.0))
  mesh = placement.make_mesh(c.mesh)
  program = program_lib.build(c, mesh)
  state = program_lib.init_state(program, c.seed)
  say = []
  with compiles.recorded() as names:
    new, grown, growth = program_lib.upcycle(
        program, transition.target_config(c), state, mesh, (),
        [mesh_step.synthetic_batch(c)], say.append)
  assert names == _TRANSITION and np.isfinite(growth.record['loss_after'])
  assert len(say) == 4   # a line before each program that compiles
  manager = checkpoint.Manager(str(tmp_path / 'checkpoints'), async_save=False)
  try:
    with compiles.recorded() as first:   # the grown layout back; digests on host (CPU)
      saved = new.to_checkpoint(grown)
      manager.save(3, saved.params, saved.opt_state, None)
    with compiles.recorded() as again:
      saved = new.to_checkpoint(grown)
      manager.save(4, saved.params, saved.opt_state, None)
  finally:
    manager.close()
  # Besides the layout, a first save compiles only Orbax's on-device slices of
  # leaves replicated over the test's 8 devices (one per shape, kept by jit's
  # cache; none on one device); the digests run on host (workdir/digest.py).
  assert [n for n in first if n != 'slice'] == ['unstack'] and again == []
