"""One entry point for routers: `moe.router` names an entry of this registry.

  routing = routers.get(cfg.moe.router).route(cfg, x_BLD, tokens_BL)

Every router returns one record, `Routing` (top-k expert ids, their gates,
the routing distribution the balance loss and entropy see, and the logits
the z-loss sees, or None for a router without logits), so the MoE block,
routing analysis and parameter accounting never branch on a router's name.

A router is a class (a subclass of `Base` gets defaults for the last two)
registered under its name, with three static methods:
  route(cfg, x_BLD, tokens_BL) -> Routing
      called inside the MoE block's compact `__call__`, so a Linen module it
      builds with `name='router'` holds its params at `layers_i/moe/router/...`
      (parameter paths are API: docs/internals.md);
  num_params(d_model, moe) -> int   one layer's router parameters (accounting);
  check(moe)                        raises ConfigError for options it cannot use.
Every module of this package is imported when the package is, so a new
router is one file here (plus its test); see docs/architecture.md.
"""
from typing import Any, NamedTuple

from moe_jax import registry


class Routing(NamedTuple):
  idx_BLk: Any      # int32 expert ids, k per token
  gates_BLk: Any    # float32 weights of those experts' outputs
  probs_BLE: Any    # float32 routing distribution over experts (balance loss, entropy)
  logits_BLE: Any   # float32 router logits (z-loss), or None


class Base:
  """What a router need not write: no parameters to count, no options to check."""

  @staticmethod
  def num_params(d_model, moe):
    del d_model, moe
    return 0

  @staticmethod
  def check(moe):
    del moe


REGISTRY = registry.Registry('moe.router')


def register(name):
  """Class decorator: makes `moe.router=name` build this router."""
  return lambda cls: REGISTRY.register(name, cls)


def names():
  return REGISTRY.names()


def get(name):
  return REGISTRY.get(name)


registry.import_all(__path__, __name__)
