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
from moe_jax.upcycle import ops, recipes
from moe_jax.upcycle.rules import Rule

PEEK_TOKENS = 8


def _first_tokens(inputs, args, seed):
  del seed
  (source,) = inputs
  first = [[int(t) for t in b['inputs'].reshape(-1)[:PEEK_TOKENS]] for b in source.batches]
  return dict(args, first_tokens=first)


@recipes.register('toy_peek', dict(batches=2, first_tokens=None),
                  batches=lambda args: args['batches'], prepare=_first_tokens)
def toy_peek(src, dst, args):
  a = recipes.resolve('toy_peek', args)
  del src, dst
  return recipes.Recipe('toy_peek', (recipes.copy_rest(),), a, a['opt_policy'],
                        {'toy_peek.json': {'first_tokens': a['first_tokens']}})


@recipes.register('toy_pair_mean', dict(num_sources=0), sources='several')
def toy_pair_mean(src, dst, args):
  a = recipes.resolve('toy_pair_mean', args)
  del src, dst
  every = tuple(f'{recipes.source_prefix(i)}/\\1' for i in range(a['num_sources']))
  return recipes.Recipe('toy_pair_mean', (Rule(r'(.*)', every, ops.mean()),), a,
                        a['opt_policy'])
