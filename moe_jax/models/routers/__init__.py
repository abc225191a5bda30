"""One entry point for routers: `moe.router` names an entry of this registry.

  routing = routers.get(cfg.moe.router).route(cfg, x_BLD, tokens_BL)

Every router returns one record, `Routing` (top-k expert ids, their gates,
the routing distribution the balance loss and entropy see, and the logits
the z-loss sees, or None for a router without logits), so the MoE block,
routing analysis and parameter accounting never branch on a router's name.

A router is a class registered under its name with three static methods:
  route(cfg, x_BLD, tokens_BL) -> Routing
      called inside the MoE block's compact `__call__`, so a Linen module it
      builds with `name='router'` holds its params at `layers_i/moe/router/...`
      (parameter paths are API: docs/internals.md);
  num_params(d_model, moe) -> int   one layer's router parameters (accounting);
  check(moe)                        raises ConfigError for options it cannot use.
Every module of this package is imported when the package is, so a new
router is one file here (plus its test); see docs/architecture.md.
"""
import importlib
import pkgutil
from typing import Any, NamedTuple

from moe_jax.errors import ConfigError


class Routing(NamedTuple):
  idx_BLk: Any      # int32 expert ids, k per token
  gates_BLk: Any    # float32 weights of those experts' outputs
  probs_BLE: Any    # float32 routing distribution over experts (balance loss, entropy)
  logits_BLE: Any   # float32 router logits (z-loss), or None


_REGISTRY = {}


def register(name):
  """Class decorator: makes `moe.router=name` build this router."""
  def add(cls):
    if name in _REGISTRY and _REGISTRY[name] is not cls:
      raise ValueError(f'router {name!r} is registered twice')
    _REGISTRY[name] = cls
    return cls
  return add


def names():
  return tuple(_REGISTRY)


def get(name):
  if name not in _REGISTRY:
    raise ConfigError(f'moe.router={name!r} is not one of {names()}')
  return _REGISTRY[name]


for _module in pkgutil.iter_modules(__path__):
  importlib.import_module(f'{__name__}.{_module.name}')
