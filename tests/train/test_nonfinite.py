"""A diverged run stops with the step named, keeping its last good checkpoint."""
import os

import pytest

from moe_jax.errors import NonFiniteLossError
from moe_jax.train import trainer
from moe_jax.workdir import checkpoint
from tests.train import tiny


def test_nonfinite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
  workdir = str(tmp_path / 'run')
  trainer.train_and_evaluate(tiny.config(total_steps=12), workdir, stop_at=3)
  # Continue with an absurd learning rate and no clipping: the loss overflows.
  diverging = tiny.config(total_steps=12, **{'opt.lr': 1e30, 'opt.clip_norm': 0.0})
  with pytest.raises(NonFiniteLossError,
                     match=r'at step \d+; stopped, the last checkpoint before it \(step 3\) is kept'):
    trainer.train_and_evaluate(diverging, workdir)
  manager = checkpoint.Manager(os.path.join(workdir, 'checkpoints'), async_save=False)
  assert manager.latest_step() == 3


def test_nonfinite_message_says_when_no_checkpoint_was_saved():
  pending = [(2, {'loss': 1.0, 'grad_norm': 1.0, 'param_norm': 1.0}),
             (3, {'loss': float('nan'), 'grad_norm': 1.0, 'param_norm': 1.0})]
  with pytest.raises(NonFiniteLossError,
                     match=r'^loss is nan at step 3; stopped, no checkpoint was saved before it$'):
    trainer._check_finite(pending, None)  # pylint: disable=protected-access
