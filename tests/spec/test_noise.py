import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spotref.spec.noise import GOLDEN, MASK64, gumbel, mix, noise_key, uniform


def python_uniform(seed, block, step, j, v, V):
    """The documented formula, in Python integers."""
    z = mix((noise_key(seed, block, step) + (j * V + v + 1) * GOLDEN) & MASK64)
    return ((z >> 11) + 0.5) * 2.0**-53


@given(st.integers(0, 2**64 - 1), st.integers(0, 10**6), st.integers(0, 64), st.data())
def test_tensor_noise_is_the_documented_formula(seed, block, step, data):
    B, V = data.draw(st.integers(1, 8)), data.draw(st.integers(1, 50))
    u = uniform(seed, block, step, B, V)
    for _ in range(5):
        j, v = data.draw(st.integers(0, B - 1)), data.draw(st.integers(0, V - 1))
        assert u[j, v].item() == python_uniform(seed, block, step, j, v, V)


def test_pinned_values():
    # Test vectors for other decoders that reimplement the noise (and a guard against drift).
    assert mix(0) == 0 and mix(1) == 0x5692161D100B05E5
    assert uniform(0, 0, 0, 1, 3)[0].tolist() == [0.8833108082136427, 0.43152799704851, 0.0264337715925978]
    g = gumbel(42, 5, 7, 2, 2).flatten().tolist()  # log() may differ by an ulp across libms
    assert g == pytest.approx(
        [-0.8105900951417138, -0.059607713710185764, -1.1226281840724535, -0.10158554222355456], rel=1e-14
    )


def test_noise_depends_on_seed_block_and_step_only():
    base = gumbel(7, 3, 2, 4, 10)
    assert torch.equal(base, gumbel(7, 3, 2, 4, 10))
    for other in [gumbel(8, 3, 2, 4, 10), gumbel(7, 4, 2, 4, 10), gumbel(7, 3, 3, 4, 10)]:
        assert not torch.equal(base, other)


def test_uniform_is_open_and_gumbel_has_the_right_moments():
    u = uniform(1, 0, 0, 200, 1000)
    assert 0 < u.min() and u.max() < 1
    g = gumbel(1, 0, 0, 200, 1000)
    assert torch.isfinite(g).all()
    assert abs(g.mean().item() - 0.5772156649) < 0.01  # Euler-Mascheroni
    assert abs(g.var().item() - math.pi**2 / 6) < 0.03


def test_u_stays_below_one_at_the_top_53_bit_value():
    """(2**53 - 1 + 0.5) / 2**53 rounds to 1.0 in float64 (ties to even), where -log u is 0 and
    the Gumbel noise infinite: it is held at the largest float64 below 1; no other value moves."""
    from spotref.spec.noise import U_MAX, uniform_of_bits

    k = torch.tensor([0, 1, 2**52 - 1, 2**52, 2**53 - 2, 2**53 - 1], dtype=torch.int64)
    raw = (k.double() + 0.5) * 2.0**-53  # the formula without the hold
    assert raw[-1].item() == 1.0  # what the hold is for
    u = uniform_of_bits(k)
    assert torch.equal(u[:-1], raw[:-1]) and u[-1].item() == U_MAX < 1.0
    assert bool((u > 0).all()) and bool(torch.isfinite(-torch.log(-torch.log(u))).all())
