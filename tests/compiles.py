"""Names of the XLA programs compiled inside a `with` block, from JAX's own
compile log (what JAX_LOG_COMPILES=1 prints), for tests that hold a count."""
import contextlib
import logging
import re

import jax

_LOGGER = 'jax._src.interpreters.pxla'   # where jax logs 'Compiling jit(NAME) ...'
_QUIET = 'jax._src.dispatch'               # and its timings, which go nowhere here
_NAME = re.compile(r'Compiling (?:jit\()?([^) ]+)')


class _Names(logging.Handler):

  def __init__(self):
    super().__init__()
    self.names = []

  def emit(self, record):
    match = _NAME.match(record.getMessage())
    if match:
      self.names.append(match.group(1))


@contextlib.contextmanager
def recorded():
  """Yields a list that fills with the name of each program compiled."""
  handler = _Names()
  loggers = [(logging.getLogger(_LOGGER), handler), (logging.getLogger(_QUIET),
                                                     logging.NullHandler())]
  saved = [logger.propagate for logger, _ in loggers]
  for logger, h in loggers:
    logger.addHandler(h)
    logger.propagate = False   # the names are ours to read, not the console's
  try:
    with jax.log_compiles(True):
      yield handler.names
  finally:
    for (logger, h), propagate in zip(loggers, saved):
      logger.removeHandler(h)
      logger.propagate = propagate
