"""The toy data of the series (used from notebook 01 on).

* "Money Bank Grows" (notebook 01): 3 words, 3-D embeddings, two heads with
  hand-written ``W_Q, W_K, W_V`` and an output matrix ``W_O``.
* "Your journey starts with one step" (notebooks 02 and 03, as in LLMs-from-scratch): 6 words x 3 features.
* "She loves cats": a four-word vocabulary.
* "The man saw the astronomer with the telescope" (notebook 04): the ambiguous sentence
  that motivates several heads.

Worked by hand, ``Q = E @ W`` with ``W`` of shape ``(d_in, d_out)``; the matrices are
returned in that layout, so load them with ``layout="in_out"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checks import expect_int

__all__ = [
    "SHE_LOVES_CATS_VOCAB",
    "TELESCOPE_SENTENCE",
    "THE_CAT_SAT_SENTENCE",
    "MoneyBankGrows",
    "money_bank_grows",
    "sentence_embeddings",
    "she_loves_cats",
    "your_journey_starts_with_one_step",
]


@dataclass(frozen=True)
class MoneyBankGrows:
    """The worked example of notebook 01.

    tokens: ``("Money", "Bank", "Grows")``
    embeddings: ``(3, 3)``, one row per token.
    w_q, w_k, w_v: two ``(d_in=3, d_head=3)`` matrices each, head 1 then head 2, used as ``E @ W``.
    w_o: ``(3, 6)``, ``W_O`` in PyTorch's ``(d_out, d_in)`` layout: ``Concat(C^1, C^2)`` is
        ``(3, 6)`` and ``O = C @ w_o.T`` has shape ``(3, 3)`` (``C @ w_o`` cannot be computed:
        notebook 10 runs that mistake).
    """

    tokens: tuple[str, ...]
    embeddings: torch.Tensor
    w_q: tuple[torch.Tensor, torch.Tensor]
    w_k: tuple[torch.Tensor, torch.Tensor]
    w_v: tuple[torch.Tensor, torch.Tensor]
    w_o: torch.Tensor

    @property
    def num_heads(self) -> int:
        return len(self.w_q)


def money_bank_grows(dtype: torch.dtype = torch.float64) -> MoneyBankGrows:
    """The embeddings and weights of "Money Bank Grows" (float64 by default: hand arithmetic matches exactly)."""

    def t(rows: list[list[float]]) -> torch.Tensor:
        return torch.tensor(rows, dtype=dtype)

    return MoneyBankGrows(
        tokens=("Money", "Bank", "Grows"),
        embeddings=t([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]]),
        w_q=(
            t([[0.1, 0.0, 0.2], [0.0, 0.1, 0.1], [0.2, 0.1, 0.0]]),
            t([[0.0, 0.2, 0.1], [0.1, 0.0, 0.2], [0.2, 0.1, 0.0]]),
        ),
        w_k=(
            t([[0.2, 0.1, 0.0], [0.1, 0.2, 0.1], [0.0, 0.1, 0.2]]),
            t([[0.1, 0.0, 0.2], [0.2, 0.1, 0.0], [0.0, 0.2, 0.1]]),
        ),
        w_v=(
            t([[0.1, 0.2, 0.1], [0.2, 0.1, 0.2], [0.1, 0.1, 0.1]]),
            t([[0.2, 0.1, 0.2], [0.1, 0.2, 0.1], [0.1, 0.1, 0.1]]),
        ),
        w_o=t(
            [
                [0.1, 0.2, 0.1, 0.0, 0.1, 0.2],
                [0.2, 0.1, 0.0, 0.1, 0.2, 0.1],
                [0.1, 0.0, 0.2, 0.2, 0.1, 0.0],
            ]
        ),
    )


def your_journey_starts_with_one_step() -> tuple[tuple[str, ...], torch.Tensor]:
    """The 6-token sentence with 3-D inputs of notebooks 02 and 03: ``(tokens, inputs (6, 3))``."""
    tokens = ("Your", "journey", "starts", "with", "one", "step")
    inputs = torch.tensor(
        [
            [0.43, 0.15, 0.89],
            [0.55, 0.87, 0.66],
            [0.57, 0.85, 0.64],
            [0.22, 0.58, 0.33],
            [0.77, 0.25, 0.10],
            [0.05, 0.80, 0.55],
        ]
    )
    return tokens, inputs


#: The vocabulary of "She loves cats".
SHE_LOVES_CATS_VOCAB: dict[str, int] = {"she": 0, "loves": 1, "cats": 2, "dogs": 3}


def she_loves_cats() -> tuple[tuple[str, ...], torch.Tensor]:
    """``(tokens, token ids (1, 3))`` for "She loves cats" in :data:`SHE_LOVES_CATS_VOCAB`."""
    tokens = ("She", "loves", "cats")
    ids = torch.tensor([[SHE_LOVES_CATS_VOCAB[t.lower()] for t in tokens]])
    return tokens, ids


TELESCOPE_SENTENCE = "The man saw the astronomer with the telescope"
THE_CAT_SAT_SENTENCE = "The cat sat on the mat"


def sentence_embeddings(
    sentence: str, d_model: int, *, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[tuple[str, ...], torch.Tensor]:
    """Split ``sentence`` on spaces and give each word a fixed random embedding.

    Within one sentence the same word (case-insensitive) gets the same vector, so "the"
    appears twice with identical rows — only attention can tell the two apart. The vectors
    are drawn for the sentence's sorted vocabulary, so a word shared by two *different*
    sentences generally gets different vectors. Deterministic for a given ``sentence``
    and ``seed``. Returns ``(tokens, embeddings (seq, d_model))``.
    """
    expect_int("d_model", d_model)
    tokens = tuple(sentence.split())
    if not tokens:
        raise ValueError(f"sentence must contain at least one word, got {sentence!r}")
    vocabulary = sorted({t.lower() for t in tokens})
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(len(vocabulary), d_model, generator=generator, dtype=dtype)
    index = {word: i for i, word in enumerate(vocabulary)}
    return tokens, table[[index[t.lower()] for t in tokens]]
