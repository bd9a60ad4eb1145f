"""The decode's categorical draw (``draw_categorical``): each row's index drawn with its probabilities."""

from __future__ import annotations

import torch

from arena.policies.generation import draw_categorical


def test_draws_follow_each_rows_probabilities() -> None:
    torch.manual_seed(0)
    first, second = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.0, 0.1, 0.0, 0.9])
    rows = 20_000
    probs = torch.stack([first, second]).repeat(rows, 1)  # rows alternate between the two
    drawn = draw_categorical(probs)
    for offset, expected in ((0, first), (1, second)):
        counts = torch.bincount(drawn[offset::2], minlength=4).double() / rows
        assert torch.allclose(counts, expected.double(), atol=0.015)  # 4 standard errors at most
        assert counts[expected == 0].sum() == 0  # an entry of probability 0 is never drawn


def test_rows_need_not_be_normalized_and_a_certain_entry_is_always_drawn() -> None:
    probs = torch.zeros((64, 49_152))
    probs[:, 49_151] = 3.0  # the last entry, the one a rounding of the cumulative sum could overshoot
    probs[::2, 17] = 3.0
    drawn = draw_categorical(probs)
    assert set(drawn[1::2].tolist()) == {49_151}
    assert set(drawn[::2].tolist()) <= {17, 49_151} and len(set(drawn[::2].tolist())) == 2


def test_the_same_seed_draws_the_same_indices() -> None:
    probs = torch.softmax(torch.randn(8, 1000), dim=-1)
    torch.manual_seed(3)
    once = draw_categorical(probs)
    torch.manual_seed(3)
    assert torch.equal(once, draw_categorical(probs))
