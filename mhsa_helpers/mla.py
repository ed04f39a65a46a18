"""Multi-head latent attention (DeepSeek-V2): a cache of one small vector per token.

Taught in notebook 13. Grouped-query attention (notebook 08) shrinks the key/value cache by sharing key/value
heads. Latent attention keeps every head its own keys and values, but rebuilds them from one compressed *latent*
per token, so that the cache holds only that latent and one small rotated key shared by the heads (DeepSeek-AI,
2024, "DeepSeek-V2", section 2.1). For ``x (batch, seq, d_model)``, one layer::

    c_q = x @ W_DQ^T                           # (batch, seq, q_latent); x itself without q_latent
    q = split_heads(c_q @ W_UQ^T)              # (batch, heads, seq, d_head)    content part of each query
    q_r = rope(split_heads(c_q @ W_QR^T))      # (batch, heads, seq, d_rope)    position part of each query
    c_kv = x @ W_DKV^T                         # (batch, seq, d_latent)         cached
    k_r = rope(x @ W_KR^T)                     # (batch, seq, d_rope)           cached, one for every head
    k = split_heads(c_kv @ W_UK^T)             # (batch, heads, seq_k, d_head)  rebuilt from the cache
    v = split_heads(c_kv @ W_UV^T)             # (batch, heads, seq_k, d_head)
    heads = softmax([q, q_r] . [k, k_r]^T / sqrt(d_head + d_rope) + mask) v
    out = merge_heads(heads) @ W_O^T           # (batch, seq, d_model)

*Absorbed* (``absorbed=True``), the same numbers without building ``k`` or ``v``: head ``h``'s key is
``k_h = c_kv W_UK_h^T``, so ``q_h . k_h = (q_h W_UK_h) . c_kv``: the query is taken into the latent space once
and attends over the cached latents themselves; its weighted sum of latents is then taken up by ``W_UV_h``
(which a deployment folds into ``W_O``). Seen this way latent attention is multi-query attention with one wide
key/value head, the latent. RoPE cannot be folded like this — a rotation that depends on both positions sits
between ``q`` and ``k`` — hence the separate position part ``q_r . k_r``, computed alike by both paths.

DeepSeek also normalises each latent (an RMSNorm after each down-projection; a deployment caches the normalised
latent); it changes nothing above and is left out. Without ``rope`` the position part has width 0.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import Output, attend
from .checks import arguments_checked, expect_divisible, expect_int, expect_mask
from .heads import merge_heads, split_heads
from .kv_cache import KVCache
from .mha import expect_input
from .rope import RotaryEmbedding, apply_rotary

__all__ = ["LatentCache", "MultiHeadLatentAttention"]


class LatentCache(KVCache):
    """What latent attention keeps per token: its latent ``c_kv`` and its rotated key ``k_r``, shared by the heads.

    A :class:`~mhsa_helpers.kv_cache.KVCache` (concatenating, or preallocated with ``capacity=``) whose keys are
    the latents, ``(batch, length, d_latent)``, and whose values are the rotated keys, ``(batch, length, d_rope)``:
    ``d_latent + d_rope`` numbers per token and layer, where multi-head attention keeps ``2 * heads * d_head``.
    """

    @property
    def latents(self) -> torch.Tensor | None:
        """The latents ``c_kv`` held, ``(batch, length, d_latent)``."""
        return self.keys

    @property
    def rope_keys(self) -> torch.Tensor | None:
        """The rotated keys ``k_r`` held, ``(batch, length, d_rope)`` (width 0 without RoPE)."""
        return self.values

    @property
    def nbytes(self) -> int:
        """Bytes held: latents and rotated keys (a preallocated cache counts the tokens held, not its capacity)."""
        latents, rope_keys = self.latents, self.rope_keys
        return 0 if latents is None or rope_keys is None else latents.nbytes + rope_keys.nbytes


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2): keys and values rebuilt per head from one cached latent per token.

    Args:
        d_model: size of the input and output features.
        num_heads: number of heads.
        d_latent: size of the key/value latent ``c_kv``, the cached vector (DeepSeek-V2: 512 = 4 ``d_head``).
        d_head: size of each head's content part (default ``d_model // num_heads``, which must then divide).
        q_latent: size of the query latent ``c_q`` (DeepSeek-V2: 1536), or ``None`` to project the queries
            from ``x`` directly (as DeepSeek-V2-Lite).
        rope: ``None``, or a :class:`~mhsa_helpers.rope.RotaryEmbedding` for the position part: its ``d_head``
            is ``d_rope``, the width of each head's rotated query part and of the one rotated key per token
            (DeepSeek-V2: 64 = ``d_head / 2``). A model passes one to all its layers.
        causal: mask future positions (default ``True``: a decoder's attention).

    Parameters, all without bias as in DeepSeek-V2 and in ``nn.Linear`` layout ``(d_out, d_in)``: ``q_down``
    (``W_DQ``, only with ``q_latent``), ``q_up`` (``W_UQ``), ``q_rope`` (``W_QR``), ``kv_down`` (``W_DKV``),
    ``k_rope`` (``W_KR``), ``k_up`` (``W_UK``), ``v_up`` (``W_UV``), ``out_proj`` (``W_O``); ``q_rope`` and
    ``k_rope`` only with ``rope``. Head ``h`` owns rows ``h * d_head .. (h + 1) * d_head - 1`` of ``q_up``,
    ``k_up`` and ``v_up`` (and of ``q_rope``, by ``d_rope``).

    Call: ``module(x, mask=None, need_weights=False, cache=None, absorbed=False)``
        x: ``(..., seq, d_model)``, usually ``(batch, seq, d_model)``.
        mask: boolean, ``True`` = may attend, broadcastable to ``(..., heads, seq, seq_k)``; combined with the
            causal mask when ``causal``.
        need_weights: also return the attention weights ``(..., heads, seq, seq_k)``.
        cache: a :class:`LatentCache` to read the past tokens' latents and rotated keys from and append to;
            the new tokens are at positions ``cache.next_position + 0 .. seq-1``.
        absorbed: attend over the latents (``W_UK`` taken into the queries, ``W_UV`` applied after), never
            building per-head keys or values; the same outputs and weights, to rounding.
    Returns ``(..., seq, d_model)``, or ``(output, weights)`` with ``need_weights=True``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_latent: int,
        *,
        d_head: int | None = None,
        q_latent: int | None = None,
        rope: RotaryEmbedding | None = None,
        causal: bool = True,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.num_heads = expect_int("d_model", d_model), expect_int("num_heads", num_heads)
        self.d_latent = expect_int("d_latent", d_latent)
        if d_head is None:
            self.d_head = expect_divisible("d_model", d_model, "num_heads", num_heads)
        else:
            self.d_head = expect_int("d_head", d_head)
        self.q_latent = None if q_latent is None else expect_int("q_latent", q_latent)
        if rope is not None and not isinstance(rope, RotaryEmbedding):
            example = max(2, self.d_head // 4 * 2)  # DeepSeek-V2's d_rope is d_head / 2, and RoPE needs it even
            raise TypeError(
                f"rope must be None or a RotaryEmbedding of d_rope, the width of the position part, e.g. "
                f"rope=RotaryEmbedding({example}), got {type(rope).__name__}"
            )
        self.d_rope = 0 if rope is None else rope.d_head
        self.causal = bool(causal)
        self.rope = rope
        width, q_in = num_heads * self.d_head, d_model if q_latent is None else q_latent

        def linear(d_in: int, d_out: int) -> nn.Linear:
            return nn.Linear(d_in, d_out, bias=False, device=device, dtype=dtype)

        self.q_down = None if q_latent is None else linear(d_model, q_latent)
        self.q_up = linear(q_in, width)
        self.kv_down = linear(d_model, d_latent)
        self.k_up, self.v_up = linear(d_latent, width), linear(d_latent, width)
        self.q_rope = None if rope is None else linear(q_in, num_heads * self.d_rope)
        self.k_rope = None if rope is None else linear(d_model, self.d_rope)
        self.out_proj = linear(width, d_model)

    def extra_repr(self) -> str:
        q_latent = "" if self.q_latent is None else f", q_latent={self.q_latent}"
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, d_latent={self.d_latent}, d_head={self.d_head}, "
            f"d_rope={self.d_rope}{q_latent}, causal={self.causal}"
        )

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        cache: LatentCache | None = None,
        absorbed: bool = False,
    ) -> Output:
        """Notebook 13's recipe; arguments and shapes as in the class docstring."""
        cache = self.expect_call(x, mask, cache)
        past, seq, rope = (0 if cache is None else cache.next_position), x.shape[-2], self.rope
        with arguments_checked():  # every function below gets arguments built from the ones just checked
            # Queries: a content part and a position part per head.        (batch, heads, seq, d_head | d_rope)
            c_q = x if self.q_down is None else self.q_down(x)
            q = split_heads(self.q_up(c_q), self.num_heads)
            # Keys and values: one latent per token, and one rotated key for every head.  (batch, seq, ·)
            c_kv = self.kv_down(x)
            if self.q_rope is not None and self.k_rope is not None and rope is not None:
                cos, sin = rope.angles_at(past, seq)
                q_r = apply_rotary(split_heads(self.q_rope(c_q), self.num_heads), cos, sin, rope.convention)
                k_r = apply_rotary(self.k_rope(x), cos, sin, rope.convention)
            else:  # no position part: width 0
                q_r, k_r = q[..., :0], c_kv[..., :0]
            # Put the new latents and rotated keys after the cached ones.  (batch, past + seq, ·)
            if cache is not None:
                c_kv, k_r = cache.extended(c_kv, k_r)
            attend_heads = self.attend_absorbed if absorbed else self.attend_materialised
            heads, weights = attend_heads(q, q_r, c_kv, k_r, mask, need_weights)  # (batch, heads, seq, d_head)
            if cache is not None:  # kept once attention has succeeded: a failed call leaves the cache as it was
                cache.commit(c_kv, k_r)
            out = self.out_proj(merge_heads(heads))  #                          (batch, seq, d_model)
        return out if weights is None else (out, weights)

    def attend_materialised(
        self,
        q: torch.Tensor,
        q_r: torch.Tensor,
        c_kv: torch.Tensor,
        k_r: torch.Tensor,
        mask: torch.Tensor | None,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each head's keys and values rebuilt from the latents, then attention as usual.

        Shapes: ``q (..., heads, seq, d_head)``, ``q_r (..., heads, seq, d_rope)``, ``c_kv (..., seq_k,
        d_latent)``, ``k_r (..., seq_k, d_rope)`` -> ``(..., heads, seq, d_head)`` and the weights or ``None``.
        """
        k = split_heads(self.k_up(c_kv), self.num_heads)  # (..., heads, seq_k, d_head)
        v = split_heads(self.v_up(c_kv), self.num_heads)
        k_r = k_r.unsqueeze(-3).expand(*k.shape[:-1], -1)  # the same rotated key for every head
        # The default scale, 1 / sqrt(d_head + d_rope): the width of the concatenated query and key.
        return attend(
            torch.cat([q, q_r], dim=-1), torch.cat([k, k_r], dim=-1), v, mask, is_causal=self.causal,
            need_weights=need_weights,
        )  # fmt: skip

    def attend_absorbed(
        self,
        q: torch.Tensor,
        q_r: torch.Tensor,
        c_kv: torch.Tensor,
        k_r: torch.Tensor,
        mask: torch.Tensor | None,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention over the latents themselves: ``W_UK`` taken into the queries, ``W_UV`` applied to the
        weighted latents; shapes as :meth:`attend_materialised`."""
        w_uk = self.k_up.weight.view(self.num_heads, self.d_head, self.d_latent)  # k_h = c_kv @ w_uk[h].T
        w_uv = self.v_up.weight.view(self.num_heads, self.d_head, self.d_latent)  # v_h = c_kv @ w_uv[h].T
        q_latent = q @ w_uk  # (..., heads, seq, d_latent): q_h . k_h = (q_h @ w_uk[h]) . c_kv
        keys = torch.cat([c_kv, k_r], dim=-1).unsqueeze(-3)  # (..., 1, seq_k, d_latent + d_rope): one for all heads
        latents, weights = attend(
            torch.cat([q_latent, q_r], dim=-1), keys, c_kv.unsqueeze(-3), mask, is_causal=self.causal,
            scale=1.0 / math.sqrt(self.d_head + self.d_rope), need_weights=need_weights,
        )  # fmt: skip
        return latents @ w_uv.transpose(-2, -1), weights  # (..., heads, seq, d_head)

    def expect_call(self, x: torch.Tensor, mask: torch.Tensor | None, cache: LatentCache | None) -> LatentCache | None:
        """The checks of :meth:`forward`, made once at its door: ``x``, the cache it extends and the ``mask``
        against the scores ``(..., heads, seq, past + seq)``; returns the cache."""
        x = expect_input(x, self.d_model, self.kv_down.weight.dtype, size="d_model")
        if cache is not None:
            expect_latent_cache(cache, x, self.d_latent, self.d_rope)
        if mask is not None:
            seq = x.shape[-2]
            scores = (*x.shape[:-2], self.num_heads, seq, (0 if cache is None else cache.length) + seq)
            expect_mask("mask", mask, scores, "(..., seq_q, seq_k)", device=x.device)
        return cache


def expect_latent_cache(cache: object, x: torch.Tensor, d_latent: int, d_rope: int) -> LatentCache:
    """A :class:`LatentCache` that a layer of latents of ``d_latent`` and rotated keys of ``d_rope`` can extend
    with ``x``'s tokens."""
    if not isinstance(cache, LatentCache):
        raise TypeError(
            f"cache must be a LatentCache or None (latent attention caches latents, not per-head keys and values), "
            f"got {type(cache).__name__}"
        )
    cache.expect_room(x.shape[-2])
    latents, rope_keys = cache.latents, cache.rope_keys
    if latents is None or rope_keys is None:
        return cache
    if latents.shape[:-2] != x.shape[:-2]:
        raise ValueError(
            f"x has batch shape {tuple(x.shape[:-2])} but the cache holds batch shape {tuple(latents.shape[:-2])}; "
            f"a LatentCache follows one batch of sequences: use a new one (or cache.reset()) for another"
        )
    for name, held, width in (("latents", latents, d_latent), ("rope_keys", rope_keys, d_rope)):
        if held.shape[-1] != width:
            raise ValueError(
                f"cache must hold {name} of width {width} for this layer, got cached {name} of shape "
                f"{tuple(held.shape)}; use a new LatentCache for another layer"
            )
        if held.dtype != x.dtype:
            raise TypeError(f"cache must hold the dtype of x ({x.dtype}), got cached {name} of dtype {held.dtype}")
        if held.device != x.device:
            raise ValueError(f"cache must be on the device of x ({x.device}), got cached {name} on {held.device}")
    return cache
