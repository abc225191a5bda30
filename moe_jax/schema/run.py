"""The run-level config keys and the `ckpt` and `mesh` groups.

Every command that writes a workdir checks them (workdir/config_check.py:
the trainer, the HF import, the memory planner, a sweep before it launches),
and every reader of config.json relies on them (json_file.py).
"""
import dataclasses

from moe_jax.schema.field import field


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """The top-level keys of a config; configs/common.py's `base()` starts from them."""
  seed: int = field(0, stream=True)
  total_steps: int = field(300, at_least=1)
  batch_size: int = field(16, at_least=1, stream=True)
  seq_len: int = field(128, at_least=1, stream=True)
  # Microbatches per step, one optimizer update (train/step.py); 0: auto (on CPU
  # cache-sized ones where they give the same step with no extra pass, else 1:
  # train/accumulate.py). It divides each process' rows (config_check.py).
  # edc4fca: runs before it ran one batch a step.
  grad_accum_steps: int = field(0, at_least=0, added=1)
  log_every_steps: int = field(10, at_least=1)
  eval_every_steps: int = field(100, at_least=0)      # 0: no evaluation
  eval_batches: int = field(8, at_least=0)
  checkpoint_every_steps: int = field(100, at_least=0)  # 0: at the end (and on SIGTERM) only
  init_from: str = ''            # CKPT: start from another checkpoint's params


@dataclasses.dataclass(frozen=True)
class CkptConfig:
  """Orbax checkpointing (workdir/checkpoint.py: Manager.for_workdir)."""
  keep: int = field(2, at_least=0)        # newest N checkpoints
  keep_every: int = field(0, at_least=0)  # and every K-th step for good (0: none)
  async_save: bool = True


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """The device mesh (sharding.py: axes and logical rules; workdir/placement.py:
  devices and processes)."""
  data: int = -1                 # mesh axis sizes; -1: the remaining devices
  fsdp: int = 1
  expert: int = 1
  tensor: int = 1
  # The first N devices only (0: all); one-process runs (f563b3b: every device before).
  num_devices: int = field(0, added=0)
  distributed: bool = False      # jax.distributed.initialize() (SLURM, MPI, TPU detect the rest)
  # 'HOST:PORT' of process 0; with num_processes and process_id names a
  # multi-process run (moe_jax.multiprocess sets all three; 31e30d6).
  coordinator_address: str = field('', added='')
  num_processes: int = field(0, added=0)
  process_id: int = field(-1, added=-1)
  rules: str = ''                # logical->mesh overrides: 'embed=fsdp+tensor,vocab='
