"""The error a user can act on: entry points print `error: <message>` and exit 2."""


class ConfigError(ValueError):
  """Bad config value, path, shape or input; the message is one line naming it."""


class NonFiniteLossError(RuntimeError):
  """Training hit a NaN/inf loss; the last checkpoint before it is kept."""
