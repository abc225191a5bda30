"""The rule type: which source leaves make a target leaf, and with which op.

A rule is data: `Rule(target_regex, sources, op)`. Rules are matched against
*target* paths in order (first full match wins), because every target leaf must
be produced exactly once while one source leaf may feed several targets (depth
growth copies a layer into two; router rows feed replicas). `sources` is a tuple
of templates expanded with the target match (`r'layers_\\1/mlp/\\2'`), or a
callable `match -> tuple of paths` when the source index is computed (the layer
map of depth growth). A rule with no sources and a fresh op initialises the
target from scratch ("fresh init": the router, the selection bias).

An `Op` (see ops.py) is a named pair of pure functions:
  init(srcs, target, ctx) -> array       the parameter value
  moment(srcs, target, ctx, power)       the same map for optimizer moments:
      structural only (gathers and copies, never noise); fresh leaves get
      zeros; `power` p scales a copy of a source expert replicated r times by
      r**-p (Adam mu: p=1, nu: p=2, 'copy' policy: p=0), see mapping.py.
`ctx` carries the target path, a per-leaf rng and a per-layer rng (ops that
must share randomness across a layer's leaves, like drop-upcycling's neuron
set shared by wi_0, wi_1 and wo, use the layer rng).
"""
import dataclasses
import re
from typing import Callable, Union

import jax


@dataclasses.dataclass(frozen=True)
class Op:
  name: str
  init: Callable
  moment: Callable
  fresh: bool = False


@dataclasses.dataclass(frozen=True)
class Ctx:
  path: str
  rng: jax.Array
  layer_rng: jax.Array


@dataclasses.dataclass(frozen=True)
class Rule:
  target: str
  sources: Union[tuple, Callable[[re.Match], tuple]]
  op: Op

  def source_paths(self, match):
    if callable(self.sources):
      return tuple(self.sources(match))
    return tuple(match.expand(s) for s in self.sources)


def first_match(rules, path):
  """(rule, match) of the first rule whose target regex fully matches path."""
  for rule in rules:
    m = re.fullmatch(rule.target, path)
    if m:
      return rule, m
  return None, None

