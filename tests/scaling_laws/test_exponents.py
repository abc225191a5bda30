"""Seed 002's bottom-up route to eq. 8 (eqs. 7, 10, 16) on tables made by eq. 8:
the per-D1 fits and the two regressions give back the law's own parameters."""
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import exponents
from tests.scaling_laws import synthetic

# Eq. 8 with Table 8's (8, 2) exponents and a floor like a small model's.
LAW = {'A': 20.0, 'alpha1': 0.18, 'alpha2': 0.20, 'alpha3': 0.008, 'E': 1.5}
GRID = {'D1': np.array([5e4, 1.5e5, 4e5, 1.2e6]), 'D2': np.geomspace(2.5e4, 4e5, 5)}


def test_eq7_per_d1_then_eqs_10_and_16_recover_eq8():
  cols = synthetic.runs('mul', LAW, GRID, noise=0.0)
  got = exponents.bottom_up(cols, fixed={'E': LAW['E']})
  assert sorted(got['per_d1']) == sorted(GRID['D1'])
  for d1, p in got['per_d1'].items():
    # At one D1, eq. 8 is eq. 7 with alpha = alpha2 - alpha3 log D1, A = A D1^-alpha1.
    assert p['alpha'] == pytest.approx(LAW['alpha2'] - LAW['alpha3'] * np.log(d1), rel=1e-3)
    assert p['A'] == pytest.approx(LAW['A'] * d1 ** -LAW['alpha1'], rel=1e-3)
  assert got['eq10']['gamma'] == pytest.approx(LAW['alpha3'], rel=1e-2)
  assert got['eq10']['E_prime'] == pytest.approx(-LAW['alpha2'], rel=1e-2)
  assert got['eq10']['r2'] > 0.9999 and got['eq10']['n'] == 4
  assert got['eq16']['eta'] == pytest.approx(LAW['alpha1'], rel=1e-2)


def test_free_floor_and_noise():
  # E free in every per-D1 fit: still eq. 8's exponents, to a looser tolerance.
  cols = synthetic.runs('mul', LAW, GRID, noise=0.0)
  got = exponents.bottom_up(cols)
  assert got['eq10']['gamma'] == pytest.approx(LAW['alpha3'], rel=0.05)
  # With 0.2% noise the slope keeps its sign: the exponent falls as D1 grows.
  noisy = exponents.bottom_up(synthetic.runs('mul', LAW, GRID, noise=0.002, seed=1),
                              fixed={'E': LAW['E']})
  assert noisy['eq10']['gamma'] > 0


def test_regressions_by_hand_and_bad_input():
  d1 = np.array([1e4, 1e5, 1e6])
  got = exponents.exponent_law(d1, 0.3 - 0.01 * np.log(d1))
  assert got['gamma'] == pytest.approx(0.01) and got['E_prime'] == pytest.approx(-0.3)
  assert exponents.scale_law(d1, 7.0 * d1 ** -0.25)['eta'] == pytest.approx(0.25)
  with pytest.raises(ConfigError, match='eq. 10 needs at least 2 distinct D1'):
    exponents.exponent_law([1e4, 1e4], [0.1, 0.2])
  with pytest.raises(ConfigError, match='positive scale factors'):
    exponents.scale_law(d1, [1.0, -1.0, 2.0])


def test_r2_is_the_squared_correlation_on_noisy_data():
  """A least-squares line's R^2 is corr(x, y)^2; noisy points far from the
  origin tell a centred sum of squares from an uncentred one."""
  rng = np.random.default_rng(0)
  d1 = np.geomspace(1e4, 1e7, 12)
  alphas = 0.3 - 0.01 * np.log(d1) + 0.02 * rng.standard_normal(len(d1))
  scales = 7.0 * d1 ** -0.25 * np.exp(0.3 * rng.standard_normal(len(d1)))
  for got, y in ((exponents.exponent_law(d1, alphas), -alphas),
                 (exponents.scale_law(d1, scales), np.log(scales))):
    want = np.corrcoef(np.log(d1), y)[0, 1] ** 2
    assert 0.05 < want < 0.95
    assert got['r2'] == pytest.approx(want, rel=1e-9)
