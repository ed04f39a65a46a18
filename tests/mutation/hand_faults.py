"""Hand-written faults in the core: realistic bugs, planted one at a time by scripts/hand_faults.py.

Written from the core's code alone, without reading the tests (round 1, 2026-11-28).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    file: str  # path from the repository's root
    old: str  # text that occurs exactly once in the file
    new: str  # what replaces it
    what: str  # the mistake, in a few words


MHA = "mhsa_helpers/mha.py"
ROPE = "mhsa_helpers/rope.py"
REAL_MODEL = "mhsa_helpers/real_model.py"
KV_CACHE = "mhsa_helpers/kv_cache.py"
ATTENTION = "mhsa_helpers/attention.py"
MASKING = "mhsa_helpers/masking.py"
BLOCK = "mhsa_helpers/block.py"
TILED = "mhsa_helpers/tiled_attention.py"
LAYOUTS = "mhsa_helpers/weight_layouts.py"
CHECKS = "mhsa_helpers/checks.py"
SOFTMAX = "mhsa_helpers/softmax.py"
HEADS = "mhsa_helpers/heads.py"
MEMORY = "mhsa_helpers/kv_cache_memory.py"
LONG_CONTEXT = "mhsa_helpers/long_context.py"
POSITIONS = "mhsa_helpers/positions.py"
EXAMPLES = "mhsa_helpers/examples.py"

FAULTS = [
    # ------------------------------------------------------------------ mha.py (10)
    Fault(
        MHA,
        old="cos, sin = rope.angles_at(past, seq)",
        new="cos, sin = rope.angles_at(0, seq)",
        what="RoPE ignores the cache: new tokens rotated from position 0 when decoding",
    ),
    Fault(
        MHA,
        old=(
            "            if rope is not None:  # rotate queries and keys (never values) by their positions\n"
            "                if token_positions is None:  # the new tokens come after the cached ones: "
            "counted on the host\n"
            "                    cos, sin = rope.angles_at(past, seq)\n"
            "                else:  # (seq,) or (batch, seq) -> (batch, 1, seq): the same for every head\n"
            "                    cos, sin = rope.angles_for(token_positions.expand(x.shape[:-1]).unsqueeze(-2))\n"
            "                q, k = apply_rotary(q, cos, sin, rope.convention), "
            "apply_rotary(k, cos, sin, rope.convention)\n"
            "            # Put the new keys and values after the cached ones.  (batch, kv_heads, past + seq, d_head)\n"
            "            if cache is not None:\n"
            "                k, v = cache.extended(k, v)\n"
        ),
        new=(
            "            # Put the new keys and values after the cached ones.  (batch, kv_heads, past + seq, d_head)\n"
            "            if cache is not None:\n"
            "                k, v = cache.extended(k, v)\n"
            "            if rope is not None:  # rotate queries and keys (never values) by their positions\n"
            "                if token_positions is None:  # the new tokens come after the cached ones: "
            "counted on the host\n"
            "                    cos, sin = rope.angles_at(past, seq)\n"
            "                else:  # (seq,) or (batch, seq) -> (batch, 1, seq): the same for every head\n"
            "                    cos, sin = rope.angles_for(token_positions.expand(x.shape[:-1]).unsqueeze(-2))\n"
            "                q, k = apply_rotary(q, cos, sin, rope.convention), "
            "apply_rotary(k, cos, sin, rope.convention)\n"
        ),
        what="keys appended to the cache before RoPE, so cached keys are rotated again",
    ),
    Fault(
        MHA,
        old=(
            "            if self.gate_proj is not None:  # each head scaled by a sigmoid of its token's input "
            "(notebook 12)\n"
            "                heads = heads * torch.sigmoid(split_heads(self.gate_proj(x), heads_q))\n"
            "            # Merge the heads and project.                              (batch, seq, d_out)\n"
            "            out = self.out_proj(merge_heads(heads))\n"
        ),
        new=(
            "            # Merge the heads and project.                              (batch, seq, d_out)\n"
            "            out = self.out_proj(merge_heads(heads))\n"
            "            if self.gate_proj is not None:  # each head scaled by a sigmoid of its token's input "
            "(notebook 12)\n"
            "                out = out * torch.sigmoid(self.gate_proj(x))\n"
        ),
        what="output gate applied after W_O instead of to the heads before it",
    ),
    Fault(
        MHA,
        old="self.qkv_proj = nn.Linear(self.d_in, d_model + 2 * self.kv_dim,",
        new="self.qkv_proj = nn.Linear(self.d_in, 3 * d_model,",
        what="fused QKV projection sized 3 * d_model, ignoring fewer key/value heads (GQA)",
    ),
    Fault(
        MHA,
        old="(0 if cache is None else cache.held) + seq)",
        new="(0 if cache is None else cache.length) + seq)",
        what="mask checked against every token seen, not the keys a sliding-window cache holds",
    ),
    Fault(
        MHA,
        old="q = F.linear(x, weights.q, weights.q_bias)",
        new="q = F.linear(x, weights.q.T, weights.q_bias)",
        what="functional form: W_Q applied transposed (paper layout mixed with nn.Linear layout)",
    ),
    Fault(
        MHA,
        old="if weights.o.shape[1] != d_model:",
        new="if weights.o.shape[0] != d_model:",
        what="functional form checks W_O's rows instead of its columns against d_model",
    ),
    Fault(
        MHA,
        old=(
            "    if not rope_on:\n"
            "        raise ValueError(\n"
            '            "token_positions are RoPE positions, but RoPE is off: enable it (rope=a RotaryEmbedding) "\n'
            '            f"or drop them; got token_positions of shape {tuple(token_positions.shape)}"\n'
            "        )\n"
        ),
        new="",
        what="token_positions silently ignored when RoPE is off (check removed)",
    ),
    Fault(
        MHA,
        old="        causal: bool = False,\n        qkv_bias: bool = True,",
        new="        causal: bool = True,\n        qkv_bias: bool = True,",
        what="MultiHeadSelfAttention is causal by default",
    ),
    Fault(
        MHA,
        old="(self.dropout if self.training else 0.0)",
        new="self.dropout",
        what="attention dropout also applied in eval mode",
    ),
    # ------------------------------------------------------------------ rope.py (7)
    Fault(
        ROPE,
        old="exponents = torch.arange(0, d_head, 2, device=device, dtype=torch.float64) / d_head",
        new="exponents = torch.arange(0, d_head // 2, device=device, dtype=torch.float64) / d_head",
        what="RoPE frequency exponent i/d instead of 2i/d",
    ),
    Fault(
        ROPE,
        old="rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)",
        new="rotated = torch.stack((x_even * cos + x_odd * sin, x_odd * cos - x_even * sin), dim=-1)",
        what="interleaved RoPE rotates the other way (sign of sin flipped)",
    ),
    Fault(
        ROPE,
        old='    if convention == "interleaved":\n        x_even, x_odd',
        new='    if convention == "half_split":\n        x_even, x_odd',
        what="RoPE pairing conventions swapped (interleaved pairs halves, half_split pairs neighbours)",
    ),
    Fault(
        ROPE,
        old="return (magnitude * angles.cos()).float().to(device), (magnitude * angles.sin()).float().to(device)",
        new="return (magnitude * angles.sin()).float().to(device), (magnitude * angles.cos()).float().to(device)",
        what="RoPE table: cos and sin swapped",
    ),
    Fault(
        ROPE,
        old="expect_positions_below(None, self.max_seq_len, start, start + length - 1)",
        new="expect_positions_below(None, self.max_seq_len, start, start + length)",
        what="angles_at off by one: the last cached position max_seq_len - 1 is refused",
    ),
    Fault(
        ROPE,
        old="        max_seq_len: int = 2048,\n        base: float = 10000.0,",
        new="        max_seq_len: int = 2048,\n        base: float = 1000.0,",
        what="RotaryEmbedding default base 1000 instead of 10000",
    ),
    Fault(
        ROPE,
        old="return (1 - ramp) * theta / s + ramp * theta, temperature**2",
        new="return ramp * theta / s + (1 - ramp) * theta, temperature**2",
        what="YaRN ramp inverted: fast pairs interpolated, slow pairs kept",
    ),
    # ------------------------------------------------------------------ real_model.py (5)
    Fault(
        REAL_MODEL,
        old=(
            "        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, device=device)\n"
            "        self.lm_head.weight = self.embed.weight\n"
        ),
        new="        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, device=device)\n",
        what="CausalLM's output layer not tied to the embedding",
    ),
    Fault(
        REAL_MODEL,
        old="logits = self.lm_head(self.norm(x))",
        new="logits = self.lm_head(x)",
        what="final RMSNorm skipped before the output layer",
    ),
    Fault(
        REAL_MODEL,
        old='k = attention_row_order(weight(f"blk.{i}.attn_k.weight"), config.num_kv_heads)',
        new='k = weight(f"blk.{i}.attn_k.weight")',
        what="GGUF loading: W_K rows not permuted for half-split RoPE (only W_Q is)",
    ),
    Fault(
        REAL_MODEL,
        old="if past + ids.shape[-1] > self.config.context_length:",
        new="if past + ids.shape[-1] >= self.config.context_length:",
        what="context check off by one: a sequence filling the whole context is refused",
    ),
    Fault(
        REAL_MODEL,
        old="finished |= next_ids[:, 0] == eos_token_id",
        new="finished = next_ids[:, 0] == eos_token_id",
        what="generate forgets rows that produced EOS earlier (batch stops only if all end together)",
    ),
    # ------------------------------------------------------------------ kv_cache.py (6)
    Fault(
        KV_CACHE,
        old="return torch.cat((self._keys, keys), dim=-2), torch.cat((self._values, values), dim=-2)",
        new="return torch.cat((keys, self._keys), dim=-2), torch.cat((values, self._values), dim=-2)",
        what="cache puts the new keys/values before the old ones",
    ),
    Fault(
        KV_CACHE,
        old=(
            "        if self.capacity is None:\n"
            "            self._keys, self._values = keys, values\n"
            "        self._length = keys.shape[-2]\n"
        ),
        new=(
            "        if self.capacity is None:\n"
            "            self._keys, self._values = keys, values\n"
            "            self._length = keys.shape[-2]\n"
        ),
        what="preallocated cache never advances its length",
    ),
    Fault(
        KV_CACHE,
        old="if self.capacity is not None and self.length + new > self.capacity:",
        new="if self.capacity is not None and self.length + new >= self.capacity:",
        what="capacity check off by one: filling the cache exactly is refused",
    ),
    Fault(
        KV_CACHE,
        old="keep = (positions < self.sinks) | (positions > self._length - self.window)",
        new="keep = (positions < self.sinks) | (positions >= self._length - self.window)",
        what="sliding-window cache keeps window tokens instead of window - 1 (one key too many)",
    ),
    Fault(
        KV_CACHE,
        old=(
            '        if rope is not None and self.rope_positions == "cache":\n'
            "            # Slot index[j] becomes slot j: the kept keys behind an evicted stretch move down by its "
            "length.\n"
            "            keys = rope.moved_back(keys, index - torch.arange(index.numel()))\n"
        ),
        new="",
        what="StreamingLLM cache: keys moved down after eviction are not rotated back",
    ),
    Fault(
        KV_CACHE,
        old='return self.held if self.rope_positions == "cache" else self._length',
        new='return self._length if self.rope_positions == "cache" else self.held',
        what="sliding-window cache: next RoPE position from the wrong count (slots vs tokens seen)",
    ),
    # ------------------------------------------------------------------ attention.py (5)
    Fault(
        ATTENTION,
        old="scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale",
        new="scale = 1.0 / q.shape[-1] if scale is None else scale",
        what="scores divided by d_k instead of sqrt(d_k) (explicit path)",
    ),
    Fault(
        ATTENTION,
        old="weights = softmax(scores, dim=-1)",
        new="weights = softmax(scores, dim=-2)",
        what="softmax over the queries axis instead of the keys (explicit path)",
    ),
    Fault(
        ATTENTION,
        old="weights = softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]",
        new="weights = softmax(torch.cat([column, scores], dim=-1), dim=-1)[..., :-1]",
        what="sink column prepended but the last column dropped: a key's weight lost, the sink's kept",
    ),
    Fault(
        ATTENTION,
        old="if is_causal and seq_q > 1 and (mask is not None or seq_q != seq_k):",
        new="if is_causal and seq_q > 1 and mask is not None:",
        what="fused path passes is_causal to PyTorch for seq_q < seq_k: causal mask aligned to the first key",
    ),
    Fault(
        ATTENTION,
        old='scores = scores.masked_fill(~mask, float("-inf"))',
        new='scores = scores.masked_fill(mask, float("-inf"))',
        what="explicit path blocks the allowed keys (mask polarity inverted)",
    ),
    # ------------------------------------------------------------------ masking.py (4)
    Fault(
        MASKING,
        old=".tril(diagonal=seq_k - seq_q)",
        new=".tril(diagonal=seq_k - seq_q + 1)",
        what="causal mask lets each query see the next key",
    ),
    Fault(
        MASKING,
        old="return (positions < lengths[:, None])[:, None, None, :]",
        new="return (positions <= lengths[:, None])[:, None, None, :]",
        what="padding mask off by one: the first pad token is visible",
    ),
    Fault(
        MASKING,
        old="in_window = (behind >= 0) & (behind < window)",
        new="in_window = (behind >= 0) & (behind <= window)",
        what="sliding window sees window + 1 keys",
    ),
    Fault(
        MASKING,
        old="result = mask if result is None else result & mask",
        new="result = mask if result is None else result | mask",
        what="combine_masks ORs the masks instead of ANDing them",
    ),
    # ------------------------------------------------------------------ block.py (4)
    Fault(
        BLOCK,
        old=(
            "        x = x + self.attn(self.ln_1(x), cache=cache, token_positions=token_positions)\n"
            "        x = x + self.mlp(self.ln_2(x))\n"
        ),
        new=(
            "        x = self.ln_1(x + self.attn(x, cache=cache, token_positions=token_positions))\n"
            "        x = self.ln_2(x + self.mlp(x))\n"
        ),
        what="TransformerBlock is post-norm instead of pre-norm",
    ),
    Fault(
        BLOCK,
        old="normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)",
        new="normed = x32 / (x32.pow(2).mean(dim=-1, keepdim=True).sqrt() + self.eps)",
        what="RMSNorm adds eps outside the square root (tiny effect unless mean(x^2) is near eps)",
    ),
    Fault(
        BLOCK,
        old="out: torch.Tensor = self.down(F.silu(self.gate(x)) * self.up(x))",
        new="out: torch.Tensor = self.down(F.gelu(self.gate(x)) * self.up(x))",
        what="SwiGLU uses GELU instead of SiLU",
    ),
    Fault(
        BLOCK,
        old="        x = x + attended\n",
        new="        x = attended\n",
        what="LlamaBlock drops the residual around attention",
    ),
    # ------------------------------------------------------------------ tiled_attention.py (4)
    Fault(
        TILED,
        old="normaliser = state.normaliser * rescale + weights.sum(dim=-1, keepdim=True)",
        new="normaliser = state.normaliser + weights.sum(dim=-1, keepdim=True)",
        what="online softmax forgets to rescale the running normaliser when the max grows",
    ),
    Fault(
        TILED,
        old="new_max = torch.maximum(state.running_max, scores.amax(dim=-1, keepdim=True))",
        new="new_max = scores.amax(dim=-1, keepdim=True)",
        what="online softmax running max is the current tile's max only",
    ),
    Fault(
        TILED,
        old="if k_start > offset + q_stop - 1:",
        new="if k_start > offset + q_start:",
        what="tile skipped when its first query cannot see it, though later queries can (offset not a multiple)",
    ),
    Fault(
        TILED,
        old='scores = scores.masked_fill(key_pos > query_pos, float("-inf"))',
        new='scores = scores.masked_fill(key_pos >= query_pos, float("-inf"))',
        what="tiled causal mask hides each query's own key",
    ),
    # ------------------------------------------------------------------ weight_layouts.py (3)
    Fault(
        LAYOUTS,
        old="return weight.reshape(num_heads, 3, d_head, *weight.shape[1:]).transpose(0, 1).reshape(weight.shape)",
        new="return weight.reshape(3, num_heads, d_head, *weight.shape[1:]).transpose(0, 1).reshape(weight.shape)",
        what="per-head to stacked QKV reads the rows as (part, head) (no effect when num_heads is 1 or 3)",
    ),
    Fault(
        LAYOUTS,
        old="return torch.argsort(interleaved_to_half)",
        new="return interleaved_to_half",
        what="half_split -> interleaved RoPE permutation not inverted (self-inverse for d_head <= 4)",
    ),
    Fault(
        LAYOUTS,
        old="        weights = [w.transpose(0, 1) for w in weights]\n",
        new="        weights = [w.transpose(0, 1) for w in weights[:3]] + weights[3:]\n",
        what="layout='in_out' loader transposes W_Q, W_K, W_V but not W_O",
    ),
    # ------------------------------------------------------------------ checks.py (3)
    Fault(
        CHECKS,
        old="    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):",
        new="    if not isinstance(value, (int, np.integer)):",
        what="expect_int accepts True/False as 1/0",
    ),
    Fault(
        CHECKS,
        old="if len(shape) > len(target) or any(",
        new="if any(",
        what="expect_broadcastable accepts extra leading dimensions that grow the target",
    ),
    Fault(
        CHECKS,
        old='f"{parts_name} must divide {total_name}: expected',
        new='f"{total_name} must divide {parts_name}: expected',
        what="divisibility message names the arguments the wrong way round",
    ),
    # ------------------------------------------------------------------ softmax.py (2)
    Fault(
        SOFTMAX,
        old="exps = torch.exp(x - row_max)",
        new="exps = torch.exp(x)",
        what="softmax does not subtract the row max (overflows for large scores)",
    ),
    Fault(
        SOFTMAX,
        old="row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()",
        new="row_max = row_max.detach()",
        what="softmax of an all -inf row gives NaN (no guard on the max)",
    ),
    # ------------------------------------------------------------------ heads.py (2)
    Fault(
        HEADS,
        old="return x if groups == 1 else x.repeat_interleave(groups, dim=-3)",
        new="return x if groups == 1 else x.repeat(*([1] * (x.ndim - 3)), groups, 1, 1)",
        what="repeat_kv tiles the key/value heads (.repeat) instead of repeat_interleave",
    ),
    Fault(
        HEADS,
        old="return x.reshape(*x.shape[:-1], num_heads, x.shape[-1] // num_heads).transpose(-3, -2)",
        new="return x.reshape(*x.shape[:-2], num_heads, x.shape[-2], x.shape[-1] // num_heads)",
        what="split_heads reshapes straight to (heads, seq, d_head) without the transpose",
    ),
    # ------------------------------------------------------------------ kv_cache_memory.py (2)
    Fault(
        MEMORY,
        old="return 2 * num_layers * num_kv_heads * head_dim * tokens * batch * bytes_per_element",
        new="return num_layers * num_kv_heads * head_dim * tokens * batch * bytes_per_element",
        what="KV cache size counts the keys only, not keys and values",
    ),
    Fault(
        MEMORY,
        old="        batch=batch,\n        bytes_per_element=bytes_per_element(dtype),\n",
        new="        batch=batch,\n",
        what="kv_cache_bytes_for ignores the dtype (always 2 bytes per element)",
    ),
    # ------------------------------------------------------------------ long_context.py (1)
    Fault(
        LONG_CONTEXT,
        old="return [start ** (h + 1) for h in range(n)]",
        new="return [start**h for h in range(n)]",
        what="ALiBi slopes off by one: the first head's slope is 1",
    ),
    # ------------------------------------------------------------------ positions.py (1)
    Fault(
        POSITIONS,
        old="table[:, 0::2], table[:, 1::2] = angles.sin(), angles.cos()",
        new="table[:, 0::2], table[:, 1::2] = angles.cos(), angles.sin()",
        what="sinusoidal table puts cos in the even features and sin in the odd ones",
    ),
    # ------------------------------------------------------------------ examples.py (1)
    Fault(
        EXAMPLES,
        old="return tokens, table[[index[t.lower()] for t in tokens]]",
        new="return tokens, table[[index[t] for t in tokens]]",
        what="sentence_embeddings looks words up without lower-casing (KeyError on capitalised words)",
    ),
]
