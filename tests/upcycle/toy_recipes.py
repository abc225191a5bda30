"""Two recipes that exist for tests: each is this one file's registration,
as a user's recipe would be, and exercises one declared input.

  toy_peek       one source; reads `batches` training batches before it
                 builds, and `prepare` keeps the first tokens of each (args
                 and a record file), so a test can tell which batches it got;
                 the params are copied.
  toy_pair_mean  several sources; every param is their mean.

Imported inside a test (tests/upcycle/test_recipe_inputs.py), onto a copy of
the registry, so no other test sees them.
"""
import dataclasses
from typing import Any

from moe_jax.upcycle import ops, recipes
from moe_jax.upcycle.rules import Rule

PEEK_TOKENS = 8


@dataclasses.dataclass(frozen=True)
class Peek(recipes.Options):
  batches: int = 2
  first_tokens: Any = None


def _first_tokens(inputs, a, seed):
  del seed
  (source,) = inputs
  first = [[int(t) for t in b['inputs'].reshape(-1)[:PEEK_TOKENS]] for b in source.batches]
  return dataclasses.replace(a, first_tokens=first)


@recipes.register('toy_peek', Peek, batches=lambda a: a.batches, prepare=_first_tokens)
def toy_peek(src, dst, a):
  del src, dst
  return recipes.Recipe('toy_peek', (recipes.copy_rest(),), recipes.as_dict(a), a.opt_policy,
                        {'toy_peek.json': {'first_tokens': a.first_tokens}})


@dataclasses.dataclass(frozen=True)
class PairMean(recipes.Options):
  num_sources: int = 0


@recipes.register('toy_pair_mean', PairMean, sources='several')
def toy_pair_mean(src, dst, a):
  del src, dst
  every = tuple(f'{recipes.source_prefix(i)}/\\1' for i in range(a.num_sources))
  return recipes.Recipe('toy_pair_mean', (Rule(r'(.*)', every, ops.mean()),),
                        recipes.as_dict(a), a.opt_policy)
