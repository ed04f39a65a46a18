"""The implementations the forward benchmark compares, all holding the same weights.

The weights come from one ``MultiHeadSelfAttention(d_model, num_heads, causal=True)``, so
the competitors' outputs can be checked against each other before anything is timed
(:func:`cross_check`):

* ``"package_fast"`` — :class:`mhsa_helpers.MultiHeadSelfAttention`, the default call
  (heads computed by ``torch.nn.functional.scaled_dot_product_attention``);
* ``"package_weights"`` — the same module called with ``need_weights=True`` (explicit
  scores, mask and :func:`mhsa_helpers.softmax`, returns the weights);
* ``"naive"`` — the textbook module that materialises the scores: three ``nn.Linear``,
  explicit ``(seq, seq)`` scores, a registered float ``triu`` mask, ``masked_fill``,
  ``torch.softmax``, ``weights @ v``. It is ``Seed002MultiHeadAttention`` from
  ``tests/seed_systems.py``, the very class the tests check the package against;
* ``"torch_mha"`` / ``"torch_mha_weights"`` — ``torch.nn.MultiheadAttention`` with a causal
  ``attn_mask`` and ``is_causal=True``, ``need_weights=False`` / ``True`` (per-head weights);
* ``"hand_wired_sdpa"`` — :class:`HandWiredSDPA`, the nanoGPT pattern: one fused QKV
  ``nn.Linear``, split, view/transpose, ``F.scaled_dot_product_attention(is_causal=True)``,
  transpose back, output projection. The yardstick for the package's fast path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mhsa_helpers import MultiHeadSelfAttention
from mhsa_helpers.checks import expect_choice, expect_int

# The naive baseline is the test suite's copy of the source documents' code, kept once in
# tests/seed_systems.py; tests/ is not a package, so its folder goes on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from seed_systems import Seed002MultiHeadAttention

__all__ = [
    "IMPLEMENTATIONS",
    "LABELS",
    "REFERENCE",
    "Competitors",
    "ForwardFn",
    "HandWiredSDPA",
    "build_competitors",
    "cross_check",
]

IMPLEMENTATIONS = (
    "package_fast",
    "package_weights",
    "naive",
    "torch_mha",
    "torch_mha_weights",
    "hand_wired_sdpa",
)
"""Names of the competitors, in the order the benchmark prints them."""

REFERENCE = "hand_wired_sdpa"
"""The competitor every time is divided by."""

LABELS = {
    "package_fast": "MultiHeadSelfAttention (fast path)",
    "package_weights": "MultiHeadSelfAttention need_weights=True",
    "naive": "naive (scores materialised)",
    "torch_mha": "nn.MultiheadAttention need_weights=False",
    "torch_mha_weights": "nn.MultiheadAttention need_weights=True",
    "hand_wired_sdpa": "hand-wired F.sdpa (nanoGPT style)",
}
"""Human-readable name of each competitor, for tables and plots."""

ForwardFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]
"""A competitor's call: ``x (batch, seq, d_model)`` -> ``(output, weights or None)``."""


class HandWiredSDPA(nn.Module):
    """Causal self-attention wired by hand around ``F.scaled_dot_product_attention``
    (nanoGPT's ``CausalSelfAttention`` without dropout): the yardstick for the fast path.

    Parameters: ``c_attn = nn.Linear(d_model, 3 * d_model)`` with rows ``[W_Q; W_K; W_V]``,
    ``c_proj = nn.Linear(d_model, d_model)``.
    Shapes: ``x (batch, seq, d_model)`` -> ``(batch, seq, d_model)``.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True) -> None:
        super().__init__()
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
        self.d_model = d_model
        self.num_heads = num_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.c_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.d_model, dim=2)
        h = self.num_heads
        q = q.view(B, T, h, C // h).transpose(1, 2)  # (B, h, T, d_head)
        k = k.view(B, T, h, C // h).transpose(1, 2)
        v = v.view(B, T, h, C // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


@dataclass
class Competitors:
    """The competing implementations, all holding the weights of ``reference``.

    ``modules`` maps a name of :data:`IMPLEMENTATIONS` to its ``nn.Module`` (the two
    package entries share ``reference``, the two ``nn.MultiheadAttention`` entries share
    one module). Call :meth:`forward_functions` to get callables for a given length.
    """

    reference: MultiHeadSelfAttention
    modules: dict[str, nn.Module]
    names: tuple[str, ...]

    def forward_functions(self, seq_len: int) -> dict[str, ForwardFn]:
        """``{name: fn}`` with ``fn(x (batch, seq_len, d_model)) -> (output (batch, seq_len,
        d_model), weights (batch, heads, seq_len, seq_len) or None)``.

        The boolean ``attn_mask`` that ``nn.MultiheadAttention`` needs (``True`` = blocked)
        is built here, once per length, outside anything that is timed.
        """
        expect_int("seq_len", seq_len)
        fns: dict[str, ForwardFn] = {}
        for name in self.names:
            module = self.modules[name]
            if name == "package_weights":
                fns[name] = lambda x, m=module: m(x, need_weights=True)
            elif name in ("package_fast", "naive", "hand_wired_sdpa"):
                fns[name] = lambda x, m=module: (m(x), None)
            else:
                device = next(module.parameters()).device
                blocked = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)
                need = name == "torch_mha_weights"
                fns[name] = lambda x, m=module, mask=blocked, need=need: m(
                    x, x, x, attn_mask=mask, is_causal=True, need_weights=need, average_attn_weights=False
                )
        return fns


def build_competitors(
    d_model: int = 512,
    num_heads: int = 8,
    *,
    max_seq_len: int = 4096,
    names: Iterable[str] = IMPLEMENTATIONS,
    seed: int = 0,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> Competitors:
    """Build the competitors named in ``names``, in eval mode, with identical weights.

    The weights come from ``MultiHeadSelfAttention(d_model, num_heads, causal=True)``
    initialised under ``torch.manual_seed(seed)`` (biases included). ``max_seq_len`` sizes
    the naive path's ``(max_seq_len, max_seq_len)`` float mask buffer; it is only allocated
    when ``"naive"`` is requested.
    """
    names = tuple(names)
    for name in names:
        expect_choice("names", name, IMPLEMENTATIONS)
    expect_int("max_seq_len", max_seq_len)
    factory = {"device": device, "dtype": dtype}
    torch.manual_seed(seed)
    reference = MultiHeadSelfAttention(d_model, num_heads, causal=True, **factory).eval()
    qkv_w, qkv_b = reference.qkv_proj.weight, reference.qkv_proj.bias
    o_w, o_b = reference.out_proj.weight, reference.out_proj.bias
    modules: dict[str, nn.Module] = {}
    torch_mha: nn.MultiheadAttention | None = None
    with torch.no_grad():
        for name in names:
            if name in ("package_fast", "package_weights"):
                modules[name] = reference
            elif name == "naive":
                naive = Seed002MultiHeadAttention(d_model, d_model, 0.0, max_seq_len, num_heads, qkv_bias=True)
                naive = naive.to(**factory)
                for linear, w, b in zip(
                    (naive.W_query, naive.W_key, naive.W_value), qkv_w.chunk(3), qkv_b.chunk(3), strict=True
                ):
                    linear.weight.copy_(w)
                    linear.bias.copy_(b)
                naive.op_proj.weight.copy_(o_w)
                naive.op_proj.bias.copy_(o_b)
                modules[name] = naive.eval()
            elif name == "hand_wired_sdpa":
                wired = HandWiredSDPA(d_model, num_heads).to(**factory)
                wired.c_attn.weight.copy_(qkv_w)
                wired.c_attn.bias.copy_(qkv_b)
                wired.c_proj.weight.copy_(o_w)
                wired.c_proj.bias.copy_(o_b)
                modules[name] = wired.eval()
            else:
                if torch_mha is None:
                    torch_mha = nn.MultiheadAttention(d_model, num_heads, batch_first=True, **factory)
                    torch_mha.in_proj_weight.copy_(qkv_w)
                    torch_mha.in_proj_bias.copy_(qkv_b)
                    torch_mha.out_proj.weight.copy_(o_w)
                    torch_mha.out_proj.bias.copy_(o_b)
                    torch_mha.eval()
                modules[name] = torch_mha
    return Competitors(reference=reference, modules=modules, names=names)


def cross_check(
    competitors: Competitors,
    seq_len: int = 48,
    batch: int = 2,
    *,
    seed: int = 1,
    # Float32 at d_model 512: the competitors' kernels sum in different orders. The usual gap is
    # ~2e-7, and once (one run among many, on a loaded machine) one row differed by 3e-5; a wiring
    # mistake differs by 1e-2 or more. So 1e-4 still catches every mistake without failing on that.
    atol: float = 1e-4,
    rtol: float = 1e-4,
) -> dict[str, float]:
    """Assert that every competitor gives the output of ``"hand_wired_sdpa"`` (or, if that
    is absent, of the first competitor) on ``x (batch, seq_len, d_model)``, and that the
    weight-returning competitors agree on the per-head weights ``(batch, heads, seq, seq)``.

    Raises ``AssertionError`` (from ``torch.testing.assert_close``) on a mismatch.
    Returns ``{name: max |output - reference output|}``.
    """
    d_model = competitors.reference.d_in
    param = competitors.reference.qkv_proj.weight
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq_len, d_model, generator=generator).to(device=param.device, dtype=param.dtype)
    fns = competitors.forward_functions(seq_len)
    with torch.inference_mode():
        results = {name: fn(x) for name, fn in fns.items()}
    base_name = REFERENCE if REFERENCE in results else competitors.names[0]
    base_out = results[base_name][0]
    differences = {}
    weights = [(name, w) for name, (_, w) in results.items() if w is not None]
    for name, (out, _) in results.items():
        torch.testing.assert_close(
            out, base_out, atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n} vs {base_name}: {m}"
        )
        differences[name] = float((out - base_out).abs().max())
    for name, w in weights[1:]:
        torch.testing.assert_close(w, weights[0][1], atol=atol, rtol=rtol, msg=lambda m, n=name: f"weights of {n}: {m}")
    return differences
