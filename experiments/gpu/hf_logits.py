"""A checkpoint's logits in moe_jax and, exported, in transformers.

  python -m experiments.gpu.hf_logits --ckpt=CKPT --hf=DIR

Prints one JSON line: the largest |logit| difference on two fixed rows of
tokens against the tolerance the two float32 computations allow. moe_jax
runs the checkpoint in float32 at matmul precision 'highest' (on a GPU,
float32 matmuls are TF32 by default); transformers runs on the CPU, in the
float32 the export writes. Without torch or transformers installed the
line says 'skipped' (the dry run's case: they exist on the GPU machine).
"""
import importlib.util
import json

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from moe_jax import cli
from moe_jax.eval import restore
from moe_jax.workdir import checkpoint

ROWS, LENGTH = 2, 32


def compare(ckpt, hf_dir):
  config = checkpoint.workdir_config(ckpt).copy_and_resolve_references()
  config.model.update(dtype='float32', attention='reference')
  loaded = restore.load(ckpt, config)
  cfg = loaded.model.cfg
  tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (ROWS, LENGTH)).astype(np.int32)
  with jax.default_matmul_precision('highest'):
    ours, _ = jax.jit(loaded.model.apply)({'params': loaded.params}, jnp.asarray(tokens))
  ours = np.asarray(ours, np.float32)
  # Each layer adds float32 sums of d_model terms in another order: the
  # logits may differ by that many roundings of their own size per layer.
  tol = float(cfg.num_layers * cfg.d_model * np.finfo(np.float32).eps * np.max(np.abs(ours)))
  out = dict(step=loaded.step, tokens=[ROWS, LENGTH], max_abs_logit=float(np.max(np.abs(ours))),
             tol=tol)
  missing = [m for m in ('torch', 'transformers') if importlib.util.find_spec(m) is None]
  if missing:
    return dict(out, status='skipped', reason=f'{" and ".join(missing)} not installed')
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir).float().eval()
  with torch.no_grad():
    theirs = model(torch.from_numpy(tokens.astype(np.int64))).logits.numpy()
  diff = float(np.max(np.abs(theirs - ours)))
  return dict(out, status='ok' if diff <= tol else 'mismatch', max_abs_diff=diff,
              transformers=transformers.__version__, torch=torch.__version__)


def main(argv):
  del argv
  cli.print_json_result(compare, flags.FLAGS.ckpt, flags.FLAGS.hf)


if __name__ == '__main__':
  flags.DEFINE_string('ckpt', None, 'Workdir or checkpoint step directory.')
  flags.DEFINE_string('hf', None, 'The export_hf directory of the same checkpoint.')
  flags.mark_flags_as_required(['ckpt', 'hf'])
  cli.run_app(main)
