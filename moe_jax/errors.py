"""Errors a user can act on. Entry points print `error: <message>` on one line
(moe_jax/cli.py): exit 2 for a ConfigError (bad input: nothing was written),
exit 1 for a RunError (the run itself failed)."""


class ConfigError(ValueError):
  """Bad config value, path, shape or input; the message is one line naming it."""


class CorruptCheckpointError(ConfigError):
  """A checkpoint step that cannot be read back as it was saved: unreadable
  or missing files, a digest that does not match, non-finite params. The
  message names the step; the trainer falls back to an older intact step."""


class RunError(RuntimeError):
  """A run that failed on its own, after its inputs were accepted."""


class NonFiniteLossError(RunError):
  """Training hit a NaN/inf loss (or an evaluation came out non-finite)."""


class SaveError(RunError):
  """A checkpoint could not be written (disk full, permissions); the message
  names the step and the newest complete checkpoint."""
