"""Scaling laws and costs of upcycling: fit seed 002's laws to runs, query D*
and compute-optimal allocations, and price expert upcycling with seed 000's
cost model. CLI: `python -m moe_jax.scaling_laws --help`."""
