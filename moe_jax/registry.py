"""Name -> entry registries: what a config key names (`moe.router`,
`upcycle.recipe`) is looked up here, never switched on by string.

  REGISTRY = registry.Registry('moe.router')
  REGISTRY.register('hash', Hash); REGISTRY.get(config.moe.router)
  registry.import_all(__path__, __name__)   # at the end of a package's __init__

A package whose every module registers itself on import (models/routers/,
upcycle/recipes/) gains an entry by gaining a file: docs/architecture.md.
"""
import importlib
import pkgutil

from moe_jax.errors import ConfigError


class Registry:

  def __init__(self, key):
    self.key = key        # the config key that names an entry, for errors
    self.entries = {}

  def register(self, name, entry):
    if self.entries.get(name, entry) is not entry:
      raise ValueError(f'{self.key} {name!r} is registered twice')
    self.entries[name] = entry
    return entry

  def names(self):
    return tuple(self.entries)

  def get(self, name):
    if name not in self.entries:
      raise ConfigError(f'{self.key}={name!r} is not one of {self.names()}')
    return self.entries[name]


def import_all(path, package):
  """Imports every module of a package (its `__path__`, `__name__`)."""
  for module in pkgutil.iter_modules(path):
    importlib.import_module(f'{package}.{module.name}')
