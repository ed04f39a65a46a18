"""The model of notebook 07: a two-layer attention-only Transformer built from the package. Part of the
induction base (:mod:`mhsa_helpers.teaching.induction`): notebook 09 stretches the trained one to longer
sequences.

::

    x = embed(tokens) (+ pos_embed(positions))          # (batch, seq, d_model)
    for layer in layers:                                # MultiHeadSelfAttention(causal=True)
        out, weights = layer(x, need_weights=True)
        x = x + out                                     # the residual stream
    logits = unembed(x)                                 # (batch, seq, vocab)

No MLPs and no layer norms: every computation is attention, so what the model learned is
visible in its attention weights.

``attention=`` swaps in another attention module, e.g. the learner's ``MyCausalSelfAttention`` of
notebook 06 ("train your own module", notebook 07): it is called as ``attention(d_model, num_heads)``
once per layer, and its module is called as ``module(x, need_weights=True)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from ...checks import expect_divisible, expect_int
from ...mha import MultiHeadSelfAttention
from ...rope import RotaryEmbedding

__all__ = ["POSITIONS", "AttentionOnlyTransformer", "output_projection"]

#: Where the model gets positional information: learned absolute position embeddings, or RoPE.
POSITIONS = ("learned", "rope")


class AttentionOnlyTransformer(nn.Module):
    """Token embedding, positions, ``num_layers`` causal attention layers with residuals, unembedding.

    Args:
        vocab_size: number of token ids.
        d_model: width of the residual stream.
        num_heads: heads per layer; must divide ``d_model`` (and give an even ``d_head`` with RoPE).
        num_layers: attention layers (2 for induction heads).
        max_seq_len: longest sequence (size of the learned position table).
        positions: ``"learned"`` (a learned embedding added to the tokens) or ``"rope"``
            (rotary embeddings inside every attention layer).
        attention: ``None`` (the package's causal ``MultiHeadSelfAttention``) or a class or function
            called as ``attention(d_model, num_heads)`` that returns an ``nn.Module`` following notebook
            06's contract: ``module(x, need_weights=True)`` with ``x (batch, seq, d_model)`` returns
            ``(out (batch, seq, d_model), weights (batch, heads, seq, seq))``, causal, and with ``positions="rope"``
            rotating queries and keys itself (the model then adds no positions). Ablation zeroes the
            input of its output projection ``w_o``.

    Call: ``model(tokens, ablate=())`` with ``tokens (batch, seq)`` int64 returns
    ``(logits, weights)``: ``logits (batch, seq, vocab)`` and a list with one
    ``(batch, heads, seq, seq)`` attention tensor per layer. ``ablate`` is an iterable of
    ``(layer, head)`` pairs whose output is zeroed before the layer's output projection.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        *,
        num_layers: int = 2,
        max_seq_len: int = 64,
        positions: str = "learned",
        attention: Callable[[int, int], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        expect_int("vocab_size", vocab_size, 2)
        expect_int("d_model", d_model, 1)
        expect_int("num_heads", num_heads, 1)
        expect_int("num_layers", num_layers, 1)
        expect_int("max_seq_len", max_seq_len, 1)
        expect_divisible("d_model", d_model, "num_heads", num_heads)
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(map(repr, POSITIONS))}, got {positions!r}")
        self.vocab_size, self.d_model, self.num_heads = vocab_size, d_model, num_heads
        self.max_seq_len, self.positions = max_seq_len, positions
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_seq_len, d_model) if positions == "learned" else None
        d_head = d_model // num_heads
        #: True when the layers are ``attention``'s modules rather than the package's.
        self.custom_attention = attention is not None
        if attention is None:
            rope = RotaryEmbedding(d_head, max_seq_len) if positions == "rope" else None  # one table, every layer
            layers: list[nn.Module] = [
                MultiHeadSelfAttention(d_model, num_heads, causal=True, rope=rope) for _ in range(num_layers)
            ]
        else:
            layers = [_build_attention(attention, d_model, num_heads) for _ in range(num_layers)]
        self.layers = nn.ModuleList(layers)
        self.unembed = nn.Linear(d_model, vocab_size)

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    def forward(
        self, tokens: torch.Tensor, ablate: Iterable[tuple[int, int]] = (), mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``tokens (batch, seq)`` -> ``(logits (batch, seq, vocab), [weights (batch, heads, seq, seq)] * layers)``.

        ``mask`` (boolean ``(seq, seq)``, True = may attend) restricts every layer further than
        causality, e.g. to a sliding window (notebook 09)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"tokens must be an int64 tensor of shape (batch, seq), got {_describe(tokens)}")
        if tokens.ndim != 2 or not 1 <= tokens.shape[1] <= self.max_seq_len:
            raise ValueError(
                f"tokens must have shape (batch, seq) with 1 <= seq <= max_seq_len={self.max_seq_len}, "
                f"got shape {tuple(tokens.shape)}"
            )
        silenced = self._check_ablate(ablate)
        if mask is not None and self.custom_attention:
            raise ValueError(
                "mask works only with the package's attention (attention=None): got a mask and a custom module"
            )
        x = self.embed(tokens)
        if self.pos_embed is not None:
            x = x + self.pos_embed(torch.arange(tokens.shape[1], device=tokens.device))
        all_weights = []
        for index, layer in enumerate(self.layers):
            heads = [head for (at, head) in silenced if at == index]
            hook = output_projection(layer).register_forward_pre_hook(self._zero_heads(heads)) if heads else None
            try:
                if self.custom_attention:
                    out, weights = _checked_output(layer, layer(x, need_weights=True), x, self.num_heads)
                else:
                    out, weights = layer(x, mask=mask, need_weights=True)
            finally:
                if hook is not None:
                    hook.remove()
            x = x + out
            all_weights.append(weights)
        return self.unembed(x), all_weights

    def _check_ablate(self, ablate: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        pairs = list(ablate)
        for pair in pairs:
            ok = isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(i, int) for i in pair)
            if not ok or not (0 <= pair[0] < len(self.layers) and 0 <= pair[1] < self.num_heads):
                raise ValueError(
                    f"ablate must hold (layer, head) pairs with 0 <= layer < {len(self.layers)} and "
                    f"0 <= head < {self.num_heads}, got {pair!r}"
                )
        return pairs

    def _zero_heads(self, heads: list[int]):
        d_head = self.d_head

        def hook(module: nn.Module, inputs: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
            # The output projection sees the heads side by side, head h in columns h*d_head .. (h+1)*d_head.
            merged = inputs[0].clone()
            for head in heads:
                merged[..., head * d_head : (head + 1) * d_head] = 0
            return (merged,)

        return hook


def output_projection(layer: nn.Module) -> nn.Module:
    """The ``W_O`` of an attention layer, whose input holds the heads side by side: the package's
    ``out_proj`` or, in a learner's module (notebook 06's contract), ``w_o``."""
    for name in ("out_proj", "w_o"):
        projection = getattr(layer, name, None)
        if isinstance(projection, nn.Module):
            return projection
    raise ValueError(
        f"ablate needs the attention's output projection W_O as an nn.Module attribute named out_proj (the "
        f"package's) or w_o (notebook 06's MyCausalSelfAttention), got a {type(layer).__name__} with neither"
    )


def _build_attention(attention: Callable[[int, int], nn.Module], d_model: int, num_heads: int) -> nn.Module:
    if not callable(attention) or isinstance(attention, nn.Module):
        raise TypeError(
            "attention must be a class or function called as attention(d_model, num_heads) that returns a new "
            f"nn.Module (e.g. MyCausalSelfAttention, not an instance of it), got {_describe(attention)}"
        )
    module = attention(d_model, num_heads)
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"attention(d_model, num_heads) must return an nn.Module, got {_describe(module)} from {attention!r:.60}"
        )
    return module


def _checked_output(layer: nn.Module, result: object, x: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A custom module's ``(out, weights)``, or a ValueError saying which shape it should have had."""
    batch, seq, d_model = x.shape
    expected = (
        f"(out (batch, seq, d_model) = {(batch, seq, d_model)}, "
        f"weights (batch, heads, seq, seq) = {(batch, heads, seq, seq)})"
    )
    ok = isinstance(result, tuple) and len(result) == 2 and all(isinstance(t, torch.Tensor) for t in result)
    if (
        ok
        and isinstance(result, tuple)
        and tuple(result[0].shape) == (batch, seq, d_model)
        and tuple(result[1].shape) == (batch, heads, seq, seq)
    ):
        return result[0], result[1]
    given = (
        "(" + ", ".join(str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__ for t in result) + ")"
        if isinstance(result, tuple)
        else _describe(result)
    )
    raise ValueError(f"{type(layer).__name__}(x, need_weights=True) must return {expected}, got {given}")


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of dtype {value.dtype} and shape {tuple(value.shape)}"
    return type(value).__name__
