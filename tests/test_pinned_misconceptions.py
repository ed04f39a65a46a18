"""The shared misconceptions and probes (mhsa_helpers.teaching.misconceptions): the three wrong transpositions of
K and what they tell the learner, the inputs the masking probes hand the learner's function (as their docstrings
describe them), and the random masks drawn for the masking cases. Found unpinned by mutation testing
(``make mutate``).

Written against the public API: ``wrong_axes_misconceptions``, ``blocked_key_gets_weight(run)``,
``attention_blocked_key_gets_weight(run)`` and ``random_mask``.
"""

from __future__ import annotations

import torch
from pinning import raises

from mhsa_helpers.teaching.misconceptions import (
    WRONG_AXES_FIX,
    WRONG_AXES_HINT,
    WRONG_AXES_NAME,
    WRONG_AXES_SYMPTOM,
    attention_blocked_key_gets_weight,
    blocked_key_gets_weight,
    random_mask,
    wrong_axes_misconceptions,
)

# ------------------------------------------------------------------ the wrong transpositions of K


def scores(q, k_t, *, scale=1.0):
    return (q @ k_t) * scale


def test_one_misconception_per_wrong_transposition_all_told_alike():
    mistakes = wrong_axes_misconceptions(scores)
    assert [(m.name, m.hint, m.fix, m.symptom) for m in mistakes] == [
        (WRONG_AXES_NAME, WRONG_AXES_HINT, WRONG_AXES_FIX, WRONG_AXES_SYMPTOM)
    ] * 3


def test_each_misconception_passes_the_keyword_arguments_on():
    q, k = torch.ones(2, 3), torch.ones(2, 3)
    (transposed_0_1, _, reversed_axes) = wrong_axes_misconceptions(scores)
    assert torch.equal(transposed_0_1.implementation(q, k, scale=2.0), torch.full((2, 2), 6.0))
    assert torch.equal(reversed_axes.implementation(q, k, scale=0.5), torch.full((2, 2), 1.5))


def test_the_transposition_of_axes_1_and_2_does_not_exist_for_a_matrix():
    (_, transposed_1_2, _) = wrong_axes_misconceptions(scores)
    with raises(ValueError, "this wrong transposition does not exist for this rank"):
        transposed_1_2.implementation(torch.ones(2, 3), torch.ones(2, 3))


# ------------------------------------------------------------------ the masking probes


def test_the_blocked_key_probe_hands_the_scores_and_mask_it_describes():
    # Visible keys score -1e35, the blocked one (False in the mask: True means "may attend") scores 0, in float64.
    given = []
    blocked_key_gets_weight(lambda scores, mask: given.append((scores, mask)) or torch.zeros(1, 3))
    ((scores, mask),) = given
    assert scores.dtype == torch.float64
    assert torch.equal(scores, torch.tensor([[-1e35, -1e35, 0.0]], dtype=torch.float64))
    assert torch.equal(mask, torch.tensor([[True, True, False]]))


def test_the_attention_probe_hands_the_inputs_it_describes():
    # d_k = 1: the scores q * k are -1e35 for the visible keys (values 1) and 0 for the blocked one (value 100).
    given = []
    attention_blocked_key_gets_weight(lambda *inputs: given.append(inputs) or torch.ones(1, 1))
    ((q, k, v, mask),) = given
    assert torch.equal(q, torch.tensor([[1e17]], dtype=torch.float64))
    assert torch.equal(k, torch.tensor([[-1e18], [-1e18], [0.0]], dtype=torch.float64))
    assert torch.equal(v, torch.tensor([[1.0], [1.0], [100.0]], dtype=torch.float64))
    assert torch.equal(mask, torch.tensor([[True, True, False]]))


# ------------------------------------------------------------------ random masks


def test_a_random_mask_draws_from_its_generator_alone():
    # The same seed gives the same mask, and torch's global generator is left where it was.
    with torch.random.fork_rng():
        torch.manual_seed(0)
        first = random_mask(torch.Generator().manual_seed(7), 4, 6)
        after = torch.rand(3)
        torch.manual_seed(0)
        assert torch.equal(after, torch.rand(3))
        assert torch.equal(first, random_mask(torch.Generator().manual_seed(7), 4, 6))


def test_each_entry_of_a_random_mask_is_a_fair_coin():
    mask = random_mask(torch.Generator().manual_seed(0), 32, 32)
    assert 0.4 < mask.double().mean() < 0.6


def test_a_draw_of_exactly_one_half_blocks():
    # torch.rand draws multiples of 2^-24 in [0, 1): an entry is True for the 2^23 draws below 1/2, exactly half of
    # them. Seed 479 draws exactly 0.5 at (21, 51), a place the two forced entries of row 21 leave alone.
    draws = torch.rand(64, 64, generator=torch.Generator().manual_seed(479))
    assert draws[21, 51] == 0.5
    assert not random_mask(torch.Generator().manual_seed(479), 64, 64)[21, 51]
