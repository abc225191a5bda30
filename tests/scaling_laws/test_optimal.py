"""Compute-optimal upcycling (seed 002 eq. 14, appendix F.3)."""
import numpy as np
import pytest

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
