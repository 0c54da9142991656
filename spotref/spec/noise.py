"""Counter-based Gumbel noise: ``g_k`` is a pure function of (seed, block, step k).

Exactness at T > 0 rests on this: every decoder, sequential or speculative, must see the same
noise at the same state, whatever the pass number or the batch the state is verified in. So the
noise is not drawn from a stateful RNG but computed from a counter:

    key      = mix(mix(mix(seed) ^ block) ^ step)                      (64-bit words)
    u[j, v]  = (top 53 bits of mix(key + (j * V + v + 1) * GOLDEN) + 0.5) / 2**53    in (0, 1)
    g[j, v]  = -log(-log(u[j, v]))                                      float64

``mix`` is SplitMix64's finaliser. Float64 (as LLaDA's ``add_gumbel_noise`` argues) keeps the
Gumbel tail fine enough that low-probability tokens are drawn at their true rate; u is never 0
or 1, so g is always finite. Another decoder reproduces spotref's samples by computing the same
formula; ``tests/spec/test_noise.py`` pins a few values. LLaDA's rule reads another formula of
the same u, ``(-log u) ** T`` (``BlockNoise``'s ``form``; ``spotref.spec.rules.divisor``).

Where it is exact: ``u`` is integer maths, the same bits on every device. ``log`` is not: CUDA's
float64 ``log`` differs from the CPU's in the last bit of about 0.7% of the entries (measured on
an H200), which can flip a sample. So g is defined as computed on the CPU (the same
bits under every CPU capability level, tested) and the decision rule moves it to the logits'
device: one (B, V) float64 transfer per (block, step), kept for the block by ``BlockNoise``;
``benchmarks/gpu_check.py`` measures its cost.
"""

from __future__ import annotations

import torch

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
C1, C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def mix(z: int) -> int:
    """SplitMix64 finaliser on a Python int (64-bit wrap-around)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * C1) & MASK64
    z = ((z ^ (z >> 27)) * C2) & MASK64
    return z ^ (z >> 31)


def noise_key(seed: int, block: int, step: int) -> int:
    return mix(mix(mix(seed) ^ block) ^ step)


def _signed(c: int) -> int:
    """A 64-bit word as the int64 with the same bits."""
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 words (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _mix_tensor(z: torch.Tensor) -> torch.Tensor:
    """``mix`` on int64 tensors (multiplication wraps modulo 2**64)."""
    z = (z ^ _shr(z, 30)) * _signed(C1)
    z = (z ^ _shr(z, 27)) * _signed(C2)
    return z ^ _shr(z, 31)


def uniform(seed: int, block: int, step: int, B: int, V: int, device=None) -> torch.Tensor:
    """u: (B, V) float64 in the open interval (0, 1). The top 53 bits k of each mixed word give
    (k + 0.5) / 2**53 in float64; for k = 2**53 - 1 that rounds to 1.0 (1 - 2**-54 lies halfway
    to 1, ties to even), so it is held at U_MAX, the largest float64 below 1: the one value that
    changes, and -log u stays finite."""
    counter = torch.arange(1, B * V + 1, dtype=torch.int64, device=device)
    z = _mix_tensor(counter * _signed(GOLDEN) + _signed(noise_key(seed, block, step)))
    return uniform_of_bits(_shr(z, 11)).view(B, V)


U_MAX = 1.0 - 2.0**-53  # the largest float64 below 1


def uniform_of_bits(k: torch.Tensor) -> torch.Tensor:
    """k: int64 in [0, 2**53) -> u = min((k + 0.5) / 2**53, U_MAX), float64 in (0, 1)."""
    return ((k.double() + 0.5) * 2.0**-53).clamp(max=U_MAX)


def gumbel_of(u: torch.Tensor) -> torch.Tensor:
    """g = -log(-log u): standard Gumbel noise of uniforms u, float64 of u's shape."""
    return -torch.log(-torch.log(u))


def gumbel(seed: int, block: int, step: int, B: int, V: int, device=None) -> torch.Tensor:
    """g_k: (B, V) float64 standard Gumbel noise of (seed, block, step)."""
    return gumbel_of(uniform(seed, block, step, B, V, device))


class BlockNoise:
    """The noise of one block, for every step k: computed on the CPU at first use, moved to the
    device asked for and kept there while the block is decided. The rule holds no noise: whoever
    decides (a ``Block``, a drafter's view, a recorder) owns one of these per block, made by the
    rule (``DecisionRule.block_noise``).

    ``form`` says what a step's noise is, as a function of the step's uniforms ``u`` (B, V)
    float64, evaluated on the CPU as g is: ``gumbel_of`` (g_k, the default), or another formula
    of u, such as LLaDA's divisor ``(-log u) ** T`` (``spotref.spec.rules.divisor``)."""

    def __init__(self, seed: int, block: int, block_size: int, vocab_size: int, form=gumbel_of):
        self.seed, self.block, self.shape, self.form = seed, block, (block_size, vocab_size), form
        self._g = {}  # (step, device) -> (B, V) float64

    def __call__(self, step: int, device="cpu") -> torch.Tensor:
        """The noise (B, V) float64 on ``device`` for step ``k = step`` of the block: ``form(u)``."""
        key = (step, str(device))
        if key not in self._g:
            self._g[key] = self.form(uniform(self.seed, self.block, step, *self.shape)).to(device)
        return self._g[key]
