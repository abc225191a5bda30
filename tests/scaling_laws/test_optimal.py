"""Compute-optimal upcycling (seed 002 eq. 14, appendix F.3)."""
import numpy as np
import pytest
from scipy import optimize

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import optimal
from tests.scaling_laws import synthetic

UPC = synthetic.table2('table2_upcycled')


@pytest.mark.parametrize('d1,c2', [(2e12, 1e23), (1e10, 1e20), (1e11, 3e21)])
def test_closed_form_matches_numerical_minimum(d1, c2):
  fast = optimal.closed_form(UPC, d1, c2)
  slow = optimal.numerical(UPC, d1, c2)
  np.testing.assert_allclose(fast['D2_opt'], slow['D2_opt'], rtol=1e-4)
  np.testing.assert_allclose(fast['N1_opt'], slow['N1_opt'], rtol=1e-4)
  # The budget is spent exactly: C2 = 6 N2 D2 with N2 = 1.75 N1.
  np.testing.assert_allclose(6 * 1.75 * fast['N1_opt'] * fast['D2_opt'], c2, rtol=1e-12)
  assert fast['a'] + fast['b'] == pytest.approx(1.0)


def test_llama2_scaling_is_about_n1_to_the_1_8():
  # Seed 002 sec. 5.2: Llama2 sizes trained on 2T tokens upcycle with D2 ~ N1^1.8.
  c2 = np.geomspace(1e22, 1e25, 4)
  opt = [optimal.closed_form(UPC, 2e12, c) for c in c2]
  slope = np.polyfit(np.log([o['N1_opt'] for o in opt]), np.log([o['D2_opt'] for o in opt]), 1)[0]
  assert slope == pytest.approx(1.8, abs=0.01)
  assert opt[0]['D2_vs_N1_exponent'] == pytest.approx(slope)


def test_more_sunk_tokens_lower_alpha_eff():
  effs = [optimal.closed_form(UPC, d1, 1e22)['alpha_eff'] for d1 in (1e10, 1e11, 1e12)]
  assert effs[0] > effs[1] > effs[2] > 0


def test_bad_inputs():
  with pytest.raises(ConfigError, match='C2 must be > 0'):
    optimal.closed_form(UPC, 1e12, 0.0)
  with pytest.raises(ConfigError, match=r"missing \['alpha3'"):
    optimal.closed_form({k: v for k, v in UPC.items() if k != 'alpha3'}, 1e12, 1e22)
  with pytest.raises(ConfigError, match='alpha_eff'):
    optimal.closed_form(dict(UPC, alpha3=0.01), 1e12, 1e22)


def _chinchilla_numerical(params, c, k):
  def loss(log_n):
    n = np.exp(log_n)
    return params['A'] * (c / (k * n)) ** -params['alpha'] + params['B'] * n ** -params['beta']
  res = optimize.minimize_scalar(loss, bounds=(0.0, np.log(c / k)), method='bounded',
                                 options={'xatol': 1e-10})
  return np.exp(res.x), res.fun + params['E']


@pytest.mark.parametrize('name,k', [('table2_dense', 6.0), ('table2_moe', 6 * 1.75)])
def test_chinchilla_optimum_is_the_numerical_minimum(name, k):
  p = synthetic.table2(name)
  for c in (1e19, 1e22, 1e25):
    got = optimal.chinchilla_optimal(p, c, k)
    n, loss = _chinchilla_numerical(p, c, k)
    np.testing.assert_allclose(got['N_opt'], n, rtol=1e-4)
    np.testing.assert_allclose(got['loss'], loss, rtol=1e-9)
    np.testing.assert_allclose(k * got['N_opt'] * got['D_opt'], c, rtol=1e-12)


@pytest.mark.parametrize('c', [1e19, 1e22])
def test_upcycled_total_optimum_beats_a_fine_grid(c):
  fast = optimal.upcycled_total_optimal(UPC, c)
  grid = optimal.upcycled_total_grid(UPC, c)
  # The optimiser is at or below the grid's best, and near its argmin.
  assert fast['loss'] <= grid['loss'] + 1e-12
  assert fast['loss'] == pytest.approx(grid['loss'], rel=1e-4)
  np.testing.assert_allclose(np.log(fast['N1_opt']), np.log(grid['N1_opt']), atol=0.1)
  np.testing.assert_allclose(fast['dense_share'], grid['dense_share'], atol=0.02)
  spent = 6 * fast['N1_opt'] * fast['D1_opt'] + 6 * 1.75 * fast['N1_opt'] * fast['D2_opt']
  np.testing.assert_allclose(spent, c, rtol=1e-9)


def test_fig16_from_table2_upcycling_never_wins_at_equal_total_flops():
  # Seed 002 Fig. 16 from its own Table 2: compute-optimal dense or MoE is
  # better than dense-then-upcycled at every budget.
  rows = optimal.compute_optimal_comparison(
      synthetic.table2('table2_dense'), synthetic.table2('table2_moe'), UPC,
      np.geomspace(1e19, 1e25, 4))
  for r in rows:
    assert r['upcycled'] > min(r['dense'], r['moe']), r
    assert 0 < r['upcycled_dense_share'] < 1
  assert [r['dense'] for r in rows] == sorted((r['dense'] for r in rows), reverse=True)


def test_bounded_optima_stay_inside_the_runs_ranges():
  p = synthetic.table2('table2_dense')
  c = 1e22
  free = optimal.chinchilla_optimal(p, c)
  bounds = {'N': (free['N_opt'] * 2, free['N_opt'] * 10), 'D': (1.0, 1e30)}
  got = optimal.chinchilla_optimal(p, c, bounds=bounds)
  assert got['N_opt'] == pytest.approx(free['N_opt'] * 2) and got['loss'] > free['loss']
  # The bounded optimum is the best of a fine scan of the feasible interval.
  n = np.geomspace(*bounds['N'], 2001)
  scan = p['A'] * (c / (6 * n)) ** -p['alpha'] + p['B'] * n ** -p['beta'] + p['E']
  assert got['loss'] == pytest.approx(scan.min(), rel=1e-9)
  assert optimal.chinchilla_optimal(p, c, bounds={'N': (1e3, 1e4), 'D': (1e3, 1e4)}) is None
  up = optimal.upcycled_total_grid(UPC, c, bounds={'N1': (1e9, 3e9), 'D2': (1e10, 1e12)},
                                   points=101)
  assert 1e9 <= up['N1_opt'] <= 3e9 and 1e10 <= up['D2_opt'] <= 1e12
  assert optimal.upcycled_total_grid(UPC, c, bounds={'N1': (1e9, 3e9), 'D1': (1, 2)}) is None
