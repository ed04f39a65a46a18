"""Notebook 12's exercises: the prediction of what a sink takes (``check_sink_prediction``), the learner's softmax with
a sink (``check_sink_softmax``) and the learner's own module with a learned sink per head and a headwise output gate
(``check_my_sink_gate_attention``).

The right answers are written here as a learner writes them, in plain torch: the module extends
``tests/learner_reference.py``'s ``MyCausalSelfAttention``. A wrong answer is told its symptom first and its name on a
repeat; a wrong notebook-06 module under a right extension is sent back to notebook 06 and the new lines are not
blamed; a module of the wrong form is told what differs.
"""

from __future__ import annotations

import math

import pytest
import torch
from checker_table import selectable, state_change_tests, table_tests
from learner_modules import causal_module
from learner_reference import MyCausalSelfAttention
from torch import nn

import mhsa_helpers as mh
from mhsa_helpers.lessons.sinks_and_gates.exercises import (
    SINK_GATE_MISCONCEPTIONS,
    SINK_SOFTMAX_MISCONCEPTIONS,
    check_my_sink_gate_attention,
    check_sink_prediction,
    check_sink_softmax,
)

INF = float("inf")


# ------------------------------------------------------------------ exercise 1: predict where the weight goes


def test_the_kept_weight_is_accepted_as_a_number_or_a_function_and_explained():
    result = check_sink_prediction(0.4, verbose=False)
    assert result.correct and result.message.startswith("[sink_prediction] correct: 0.4. The softmax runs over")
    assert check_sink_prediction(lambda: (1 + 3) / (1 + 3 + 6), verbose=False).correct
    assert check_sink_prediction(None, verbose=False).status == "not_attempted"


def test_a_near_miss_is_refused():
    assert check_sink_prediction(0.405, verbose=False).correct
    result = check_sink_prediction(0.42, verbose=False)
    assert result.status == "incorrect" and "too high" in result.message


@pytest.mark.parametrize(
    ("answer", "direction", "why", "name"),
    [
        (1.0, "high", "Where does the sink's share", "a softmax's weights always sum to 1"),
        (0.6, "high", "Whose share did you add up", "the sink's share instead of the keys'"),
        (0.8, "high", "What is e to the power", "the sink logit read as 0 (softmax-plus-one)"),
        (4 / (4 + math.log(6)), "high", "is the sink's term one too", "the sink's logit added without its exp"),
        (1 / 7 + 3 / 9, "high", "Do the two keys share one denominator", "each key against the sink alone"),
    ],
    ids=["sums to 1", "sink's share", "plus one", "no exp", "sigmoid per key"],
)
def test_a_wrong_reasoning_is_told_why_so_then_named(answer, direction, why, name):
    first = check_sink_prediction(answer, verbose=False)
    assert first.misconception == name and f"too {direction}" in first.message and why in first.message
    assert name not in first.message and "The value is" not in first.message
    again = check_sink_prediction(answer, verbose=False)
    assert f"this looks like '{name}'" in again.message


# ------------------------------------------------------------------ exercise 2: the sink softmax


def my_sink_softmax(scores, sink):
    column = sink.unsqueeze(-1).expand(*scores.shape[:-1], 1)  # one more logit per row
    weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)
    return weights[..., :-1]  # the sink's column dropped: it has no value vector


def rescaled(scores, sink):
    # The same weights with exps written out: the row's max, the sink's logit included, subtracted first.
    top = torch.maximum(scores.amax(dim=-1, keepdim=True), sink.unsqueeze(-1))
    exps = torch.exp(scores - top)
    return exps / (exps.sum(dim=-1, keepdim=True) + torch.exp(sink.unsqueeze(-1) - top))


def sink_added_to_every_score(scores, sink):
    return torch.softmax(scores + sink.unsqueeze(-1), dim=-1)


def sink_left_out_of_the_sum(scores, sink):
    row = torch.cat([scores, sink.unsqueeze(-1).expand(*scores.shape[:-1], 1)], dim=-1)
    exps = torch.exp(row - row.amax(dim=-1, keepdim=True))[..., :-1]
    return exps / exps.sum(dim=-1, keepdim=True)


def plus_one(scores, sink):
    zeros = torch.zeros_like(scores[..., :1])
    return torch.softmax(torch.cat([scores, zeros], dim=-1), dim=-1)[..., :-1]


def sigmoid_per_score(scores, sink):
    return torch.sigmoid(scores - sink.unsqueeze(-1))


def sinks_share(scores, sink):
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.softmax(scores, dim=-1) * torch.sigmoid(sink.unsqueeze(-1) - lse)


def first_column_dropped(scores, sink):
    column = sink.unsqueeze(-1).expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., 1:]


def sink_not_shifted(scores, sink):
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    exps = torch.exp(scores - top)
    return exps / (exps.sum(dim=-1, keepdim=True) + torch.exp(sink.unsqueeze(-1)))


def no_max(scores, sink):
    exps = torch.exp(scores)
    return exps / (exps.sum(dim=-1, keepdim=True) + torch.exp(sink.unsqueeze(-1)))


def rescaled_unguarded(scores, sink):
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.softmax(scores, dim=-1) * torch.sigmoid(lse - sink.unsqueeze(-1))


def sink_without_a_key_axis(scores, sink):
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.softmax(scores, dim=-1) * torch.sigmoid(lse - sink)


CHECKERS = {
    # A misconception known by its symptom alone has no implementation to feed.
    "sink_softmax": (check_sink_softmax, my_sink_softmax, [m for m in SINK_SOFTMAX_MISCONCEPTIONS if m.implementation]),
}

LISTED_MISTAKES = [
    ("sink_softmax", sink_added_to_every_score, "the sink takes no share: every row sums to 1"),
    ("sink_softmax", sink_left_out_of_the_sum, "the sink takes no share: every row sums to 1"),
    ("sink_softmax", plus_one, "softmax-plus-one: the sink read as 0"),
    ("sink_softmax", sigmoid_per_score, "a sigmoid per score instead of one softmax over the row"),
    ("sink_softmax", sinks_share, "the keys scaled by the sink's share"),
    ("sink_softmax", first_column_dropped, "the wrong column dropped"),
    ("sink_softmax", sink_not_shifted, "the sink not shifted with the scores"),
    ("sink_softmax", no_max, "did not subtract the row's max: exp overflows"),
    ("sink_softmax", rescaled_unguarded, "a fully masked row gives NaN"),
    ("sink_softmax", sink_without_a_key_axis, "the sink without a key axis"),
]

(
    test_independent_solution_is_correct,
    test_stub_is_not_attempted,
    test_listed_mistakes_are_named,
    test_every_misconception_is_told_apart,
    test_unknown_wrong_answer_is_incorrect,
    test_a_crash_is_reported_not_raised,
) = table_tests(CHECKERS, LISTED_MISTAKES)

test_a_right_answer_that_changes_a_global_setting_is_told_so_and_the_setting_is_back = state_change_tests(
    {"sink_softmax": (check_sink_softmax, my_sink_softmax)}
)


def test_the_rescaled_form_and_float32_are_right_too_and_the_reference_is_the_packages():
    assert check_sink_softmax(rescaled, verbose=False).correct
    assert check_sink_softmax(lambda s, k: my_sink_softmax(s.float(), k.float()).to(s.dtype), verbose=False).correct
    q, k, v = (torch.randn(2, 3, n, 4, dtype=torch.float64) for n in (5, 7, 7))
    sink = torch.randn(3, 1, dtype=torch.float64)
    _, weights = mh.scaled_dot_product_attention(q, k, v, need_weights=True, sink=sink)
    assert torch.allclose(my_sink_softmax(q @ k.transpose(-2, -1) / 2, sink), weights)


def test_a_crash_where_the_sink_meets_the_scores_is_named_on_square_inputs():
    first = check_sink_softmax(sink_without_a_key_axis, verbose=False)
    assert first.misconception == "the sink without a key axis" and "RuntimeError" in first.message
    assert "On square inputs" in first.message and "key axis" not in first.message


def test_the_sinks_column_kept_is_told_by_its_shape():
    def column_kept(scores, sink):
        column = sink.unsqueeze(-1).expand(*scores.shape[:-1], 1)
        return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)

    result = check_sink_softmax(column_kept, verbose=False)
    assert result.status == "incorrect" and result.misconception is None
    assert "your weights have 6 columns for 5 keys, shape (3, 6): one per key, and one more" in result.message


def test_a_nan_row_and_an_overflow_are_named_written_other_ways_too():
    def nan_row(scores, sink):  # right, but NaN where nothing is visible: its max is -inf
        top = scores.amax(dim=-1, keepdim=True)
        exps = torch.exp(scores - top)
        return exps / (exps.sum(dim=-1, keepdim=True) + torch.exp(sink.unsqueeze(-1) - top))

    def overflow(scores, sink):  # exp first, then the keys' share: inf / inf near +1000, 0 / 0 near -1000
        exps = torch.exp(scores)
        total = exps.sum(dim=-1, keepdim=True)
        return exps / total * (total / (total + torch.exp(sink.unsqueeze(-1))))

    assert check_sink_softmax(nan_row, verbose=False).misconception == "a fully masked row gives NaN"
    assert check_sink_softmax(overflow, verbose=False).misconception == "did not subtract the row's max: exp overflows"


def test_the_packages_function_is_noted_not_failed():
    def with_package(scores, sink):
        ones = torch.ones(1, 1, dtype=scores.dtype)
        mh.scaled_dot_product_attention(ones, ones, ones)  # a call of the package's, its result unused
        return my_sink_softmax(scores, sink)

    result = check_sink_softmax(with_package, verbose=False)
    assert result.correct and result.shortcuts == ("mhsa_helpers.attention.scaled_dot_product_attention",)
    assert "Note: your function calls `mhsa_helpers.attention.scaled_dot_product_attention`" in result.message


# ------------------------------------------------------------------ exercise 3: sinks and gates in the module


class MySinkGateAttention(MyCausalSelfAttention):  # notebook 06's module, extended
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        self.sink = nn.Parameter(torch.zeros(num_heads))  # one logit per head
        self.w_g = nn.Linear(self.w_q.in_features, num_heads)  # one gate per head, from the token's input

    def forward(self, x, cache=None, need_weights=False):
        batch, seq, _ = x.shape
        past = 0 if cache is None else cache.length
        positions = past + torch.arange(seq, device=x.device)
        q = self.rope(self.split(self.w_q(x)), positions)
        k = self.rope(self.split(self.w_k(x)), positions)
        v = self.split(self.w_v(x))
        if cache is not None:
            k, v = cache.append(k, v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (batch, heads, seq, past + seq)
        future = torch.ones(seq, past + seq, dtype=torch.bool, device=x.device).triu(past + 1)
        weights = my_sink_softmax(scores.masked_fill(future, -INF), self.sink.view(-1, 1))
        gate = torch.sigmoid(self.w_g(x)).transpose(1, 2).unsqueeze(-1)  # (batch, heads, seq, 1)
        out = self.w_o(((weights @ v) * gate).transpose(1, 2).reshape(batch, seq, -1))
        return (out, weights) if need_weights else out


def sink_gate_module(parent=MyCausalSelfAttention, **slip):
    """A MySinkGateAttention extending ``parent`` with the slips named in ``slip``, written with plain torch."""

    class Module(parent):
        rope, split = MyCausalSelfAttention.rope, MyCausalSelfAttention.split

        def __init__(self, d_model, num_heads, **kwargs):
            super().__init__(d_model, num_heads, **kwargs)
            self.sink = nn.Parameter(torch.zeros(num_heads))
            d_in = self.w_q.in_features
            self.w_g = nn.Linear(d_in, 1 if slip.get("one_gate") else num_heads)
            if "sink_value" in slip:  # the sink as one more key and value: (heads, 1, d_head)
                self.v_sink = nn.Parameter(slip["sink_value"] * torch.randn(num_heads, 1, d_model // num_heads))

        def weights(self, scores, cached, need_weights):
            sink = self.sink.view(-1, 1)
            if slip.get("detached"):
                sink = torch.tensor(sink.tolist(), dtype=scores.dtype)
            kind = slip.get("weights", "sink")
            if (
                (slip.get("plain_when") == "cache" and cached)
                or (slip.get("plain_when") == "weights" and need_weights)
                or (slip.get("plain_when") == "fast" and not need_weights)
            ):
                kind = "plain"
            if kind == "added":
                return torch.softmax(scores + sink[..., None], dim=-1)
            if kind == "plain":
                return torch.softmax(scores, dim=-1)
            if kind == "plus_one":
                return my_sink_softmax(scores, torch.zeros_like(sink))
            if kind == "sigmoid":
                return torch.sigmoid(scores - sink[..., None])
            if kind == "sinks_share":
                return torch.softmax(scores, -1) * torch.sigmoid(sink[..., None] - torch.logsumexp(scores, -1, True))
            return my_sink_softmax(scores, sink)

        def forward(self, x, cache=None, need_weights=False):
            batch, seq, _ = x.shape
            d_head = self.w_q.out_features // self.num_heads
            past = 0 if cache is None else cache.length
            positions = past + torch.arange(seq)
            raw = self.w_g(x).transpose(1, 2).unsqueeze(-1)  # (batch, heads or 1, seq, 1)
            gate = raw if slip.get("no_sigmoid") else torch.sigmoid(raw)
            q, k, v = (self.split(w(x)) for w in (self.w_q, self.w_k, self.w_v))
            q, k = self.rope(q, positions), self.rope(k, positions)
            where = slip.get("gate", "heads")
            q, k, v = (t * gate if where == name else t for t, name in ((q, "q"), (k, "k"), (v, "v")))
            if cache is not None:
                k, v = cache.append(k, v)
            scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
            future = torch.ones(seq, past + seq, dtype=torch.bool).triu(past + 1)
            scores = scores.masked_fill(future, -INF)
            if "sink_value" in slip:
                column = self.sink.view(1, -1, 1, 1).expand(batch, -1, seq, 1)
                every = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)
                weights = every[..., :-1]
                attended = weights @ v + every[..., -1:] * self.v_sink
            else:
                weights = self.weights(scores, cache is not None, need_weights)
                attended = weights @ v
            if where == "heads":
                attended = attended * gate
            if where == "from_output":
                merged = attended.transpose(1, 2).reshape(batch, seq, -1)
                attended = attended * torch.sigmoid(self.w_g(merged)).transpose(1, 2).unsqueeze(-1)
            merged = attended.transpose(1, 2).reshape(batch, seq, -1)
            if where == "tiled":
                merged = merged * torch.sigmoid(self.w_g(x)).repeat(1, 1, d_head)
            out = self.w_o(merged)
            if where == "after_w_o":
                out = out * torch.sigmoid(self.w_g(x)).repeat_interleave(d_head, dim=-1)
            if where == "after_w_o_broadcast":
                out = out * torch.sigmoid(self.w_g(x))
            return (out, weights) if need_weights else out

    Module.__name__ = Module.__qualname__ = "MySinkGateAttention"
    return Module


def written_out(theirs, x):
    """The package module's recipe written out with plain torch on its weights: causal, RoPE on interleaved pairs,
    each head's softmax with its sink logit as one more column (dropped), its output times its gate, then W_O."""
    heads, d_head, d_model, seq = theirs.num_heads, theirs.d_head, theirs.d_model, x.shape[1]

    def split(t):
        return t.view(*t.shape[:2], heads, d_head).transpose(1, 2)

    q, k, v = (
        split(t) for t in torch.nn.functional.linear(x, theirs.qkv_proj.weight, theirs.qkv_proj.bias).chunk(3, -1)
    )
    i = torch.arange(0, d_head, 2, dtype=torch.float64)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * theirs.rope.base ** (-i / d_head)
    cos, sin = angles.cos(), angles.sin()

    def rotate(t):
        even, odd = t[..., 0::2], t[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)

    scores = (rotate(q) @ rotate(k).transpose(-2, -1) / math.sqrt(d_head)).masked_fill(
        torch.ones(seq, seq, dtype=torch.bool).triu(1), -INF
    )
    column = theirs.sink.view(1, heads, 1, 1).expand(x.shape[0], heads, seq, 1)
    weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    gate = torch.sigmoid(torch.nn.functional.linear(x, theirs.gate_proj.weight, theirs.gate_proj.bias))
    attended = (weights @ v) * gate.transpose(1, 2).unsqueeze(-1)
    return torch.nn.functional.linear(attended.transpose(1, 2).reshape(x.shape[0], seq, d_model),
                                      theirs.out_proj.weight, theirs.out_proj.bias)  # fmt: skip


def test_the_right_module_is_accepted_and_gives_the_recipe_written_out_whole_and_through_a_cache():
    result = check_my_sink_gate_attention(MySinkGateAttention, verbose=False)
    assert (
        result.message == "[my_sink_gate_attention] correct on all 6 cases (3 given, 3 drawn at random for your code)."
    )
    torch.manual_seed(0)
    theirs = mh.MultiHeadSelfAttention(
        12, 3, d_in=10, causal=True, rope=mh.RotaryEmbedding(4), sink="learned", gate="headwise"
    ).double()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))  # sinks and the gate's bias away from 0
    mine = MySinkGateAttention(12, 3, d_in=10).double()
    mh.teaching.modules.load_package_weights(mine, theirs)
    with torch.no_grad():
        mine.sink.copy_(theirs.sink)
        mine.w_g.load_state_dict(theirs.gate_proj.state_dict())
        x = torch.randn(2, 7, 10, dtype=torch.float64)
        want = written_out(theirs, x)
        assert torch.allclose(mine(x), want)
        cache = mh.KVCache()
        assert torch.allclose(torch.cat([mine(x[:, t : t + 1], cache=cache) for t in range(7)], dim=1), want)


@pytest.mark.parametrize(
    ("slip", "symptom", "name"),
    [
        ({"weights": "added"}, "Every row of your weights sums to 1", "the sink takes no share: every row sums to 1"),
        ({"weights": "plain"}, "Every row of your weights sums to 1", "the sink takes no share: every row sums to 1"),
        ({"weights": "plus_one"}, "those of a sink logit of 0", "softmax-plus-one: the learned sink not used"),
        ({"weights": "sigmoid"}, "does not depend on the other keys' scores",
         "a sigmoid per score instead of one softmax over the row"),
        ({"weights": "sinks_share"}, "sum to the sink's share", "the keys scaled by the sink's share"),
        ({"sink_value": 1.0}, "With every value zero", "the sink carries a value"),
        ({"plain_when": "fast"}, "With need_weights=True your module is right", "the sink in one path of forward only"),
        ({"plain_when": "weights"}, "Without need_weights your module is right",
         "the sink in one path of forward only"),
        ({"plain_when": "cache"}, "Your full pass is right; decoded through a cache",
         "the sink dropped when a cache is used"),
        ({"gate": "q"}, "your gate acts inside the attention", "the gate applied before the attention"),
        ({"gate": "k"}, "your gate acts inside the attention", "the gate applied before the attention"),
        ({"gate": "v"}, "your gate acts inside the attention", "the gate applied before the attention"),
        ({"gate": "after_w_o"}, "after W_O has mixed the heads", "the gate applied after W_O"),
        ({"gate": "tiled"}, "scaled by another head's gate", "the gate's heads tiled across the channels"),
        ({"gate": "from_output"}, "On square inputs", "the gate read from the attention's output"),
        ({"no_sigmoid": True}, "Your gates are not between 0 and 1", "the gate without its sigmoid"),
        ({"one_gate": True}, "every head of yours is scaled by the same gate", "one gate for every head"),
        ({"detached": True}, "get no gradient", "the sink or the gate cut off from the gradient"),
    ],
    ids=["added to every score", "plain softmax", "plus one", "sigmoid", "sink's share", "sink value", "fast path",
         "weights path", "cache", "gate q", "gate k", "gate v", "after W_O", "tiled", "from output", "no sigmoid",
         "one gate", "detached"],
)  # fmt: skip
def test_a_known_mistake_is_told_by_its_symptom_then_named(slip, symptom, name):
    wrong = sink_gate_module(**slip)
    first = check_my_sink_gate_attention(wrong, verbose=False)
    assert first.status == "misconception" and first.misconception == name, first.message
    assert symptom in first.message and name not in first.message, first.message
    again = check_my_sink_gate_attention(wrong, verbose=False)
    assert f"this looks like '{name}'" in again.message, again.message


def test_every_misconception_of_the_module_has_a_learner_slip_above():
    tested = {
        "the sink takes no share: every row sums to 1", "softmax-plus-one: the learned sink not used",
        "a sigmoid per score instead of one softmax over the row", "the keys scaled by the sink's share",
        "the sink carries a value", "the sink in one path of forward only", "the sink dropped when a cache is used",
        "the gate applied before the attention", "the gate applied after W_O",
        "the gate's heads tiled across the channels", "the gate read from the attention's output",
        "the gate without its sigmoid", "one gate for every head", "the sink or the gate cut off from the gradient",
    }  # fmt: skip
    assert {m.name for m in SINK_GATE_MISCONCEPTIONS} == tested


def test_one_gate_for_every_head_is_named_by_the_layer_when_another_slip_comes_with_it():
    wrong = sink_gate_module(one_gate=True, weights="plus_one")
    check_my_sink_gate_attention(wrong, verbose=False)
    again = check_my_sink_gate_attention(wrong, verbose=False)
    assert again.misconception == "one gate for every head", again.message


def test_a_sink_kept_in_a_buffer_is_never_trained():
    class Buffered(MySinkGateAttention):
        def __init__(self, d_model, num_heads, **kwargs):
            super().__init__(d_model, num_heads, **kwargs)
            del self.sink
            self.register_buffer("sink", torch.zeros(num_heads))

    result = check_my_sink_gate_attention(Buffered, verbose=False)
    assert result.misconception == "the sink or the gate cut off from the gradient", result.message


def test_a_sink_with_a_zero_value_vector_is_right():
    assert check_my_sink_gate_attention(sink_gate_module(sink_value=0.0), verbose=False).correct


def test_a_gate_that_cannot_broadcast_after_w_o_is_an_error_at_the_learners_line_not_a_wrong_name():
    result = check_my_sink_gate_attention(sink_gate_module(gate="after_w_o_broadcast"), verbose=False)
    assert result.status == "error" and result.misconception is None
    assert "your function raised RuntimeError" in result.message
    assert "out = out * torch.sigmoid(self.w_g(x))" in result.message


@pytest.mark.parametrize(
    ("slip", "where"), [({"positions": "zero"}, "through a cache"), ({"no_mask": True}, "in a full pass")]
)
def test_a_wrong_notebook_06_module_sends_the_learner_back_and_does_not_blame_the_new_lines(slip, where):
    wrong = sink_gate_module(parent=causal_module(**slip))
    for _ in range(2):
        result = check_my_sink_gate_attention(wrong, verbose=False)
        assert result.status == "incorrect" and result.misconception is None, result.message
        assert f"already gives other numbers than the package's attention {where}" in result.message
        assert "your new lines are not to blame" in result.message
        assert "check_my_causal_self_attention(MyCausalSelfAttention)" in result.message


def test_a_notebook_06_module_that_still_raises_leaves_the_exercise_not_attempted_and_says_where():
    class Unwritten(nn.Module):
        def __init__(self, d_model, num_heads, *, d_in=None, bias=True, rope_base=10000.0):
            raise NotImplementedError

    result = check_my_sink_gate_attention(sink_gate_module(parent=Unwritten), verbose=False)
    assert result.status == "not_attempted", result.message
    assert "Unwritten.__init__ still raises NotImplementedError" in result.message and "notebook 06" in result.message


def test_a_notebook_06_module_that_cannot_be_built_as_notebook_06_builds_it_is_sent_back_there_too():
    class NoBias(nn.Module):  # notebook 04's keywords, without `bias`
        def __init__(self, d_model, num_heads, *, d_in=None, rope_base=10000.0):
            super().__init__()
            self.inner = MyCausalSelfAttention(d_model, num_heads, d_in=d_in, rope_base=rope_base)
            self.w_q, self.w_k, self.w_v, self.w_o = self.inner.w_q, self.inner.w_k, self.inner.w_v, self.inner.w_o
            self.num_heads, self.d_head, self.rope_base = num_heads, d_model // num_heads, rope_base

        def forward(self, x, cache=None, need_weights=False):
            return self.inner(x, cache=cache, need_weights=need_weights)

    wrong = sink_gate_module(parent=type("MyCausalSelfAttention", (NoBias,), {}))
    result = check_my_sink_gate_attention(wrong, verbose=False)
    assert result.status == "incorrect" and result.misconception is None, result.message
    built = "built alone as MyCausalSelfAttention(12, 2, bias=False)"
    assert "the class yours extends, MyCausalSelfAttention, " + built in result.message
    assert "raised TypeError" in result.message and "Your new lines are not to blame" in result.message


STUB = """
class MySinkGateAttention(MyCausalSelfAttention):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        raise NotImplementedError  # your code here: the sink logits and the gate's layer

    def forward(self, x, cache=None, need_weights=False):
        raise NotImplementedError  # your code here
"""


def test_the_stub_is_not_attempted():
    notebook = {"MyCausalSelfAttention": MyCausalSelfAttention}
    exec(compile(STUB, "<cell>", "exec"), notebook)
    result = check_my_sink_gate_attention(notebook["MySinkGateAttention"], verbose=False)
    assert result.status == "not_attempted" and result.message.startswith(
        "[my_sink_gate_attention] not attempted yet: replace"
    )


class NoSink(MySinkGateAttention):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        del self.sink


class OneSink(MySinkGateAttention):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        self.sink = nn.Parameter(torch.zeros(1))


class GateFromDModel(MySinkGateAttention):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        self.w_g = nn.Linear(d_model, num_heads)


class ElementwiseGate(MySinkGateAttention):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        self.w_g = nn.Linear(self.w_q.in_features, d_model)


class GateWithoutBias(MySinkGateAttention):
    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
        self.w_g = nn.Linear(self.w_q.in_features, num_heads, bias=False)


class NoNeedWeights(MySinkGateAttention):
    def forward(self, x, cache=None):
        return super().forward(x, cache)


class NeedWeightsIgnored(MySinkGateAttention):
    def forward(self, x, cache=None, need_weights=False):
        return super().forward(x, cache)


class SinkColumnReturned(MySinkGateAttention):
    def forward(self, x, cache=None, need_weights=False):
        out = super().forward(x, cache)
        if not need_weights:
            return out
        _, weights = super().forward(x, need_weights=True)
        return out, torch.cat([weights, 1 - weights.sum(-1, keepdim=True)], dim=-1)


@pytest.mark.parametrize(
    ("wrong", "told"),
    [
        (NoSink, "your module has no tensor `sink`"),
        (OneSink, "your self.sink has shape (1,); with 2 heads it holds one logit per head"),
        (GateFromDModel, "your self.w_g reads 12 features, but the gate reads the token's input x, d_in=10"),
        (ElementwiseGate, "your self.w_g gives 8 gates per token; the headwise gate gives one per head, 2 here"),
        (GateWithoutBias, "your self.w_g has no bias"),
        (NoNeedWeights, "your forward takes (x, cache=None); it must take what your MyCausalSelfAttention's takes"),
        (NeedWeightsIgnored, "called with need_weights=True, your forward returned Tensor"),
        (SinkColumnReturned, "got shape (3, 2, 5, 6), expected shape (3, 2, 5, 5)"),
    ],
    ids=["no sink", "one sink", "w_g from d_model", "elementwise", "no gate bias", "no need_weights",
         "need_weights ignored", "sink column"],
)  # fmt: skip
def test_a_module_of_another_form_is_told_what_differs(wrong, told):
    result = check_my_sink_gate_attention(wrong, verbose=False)
    assert result.status == "incorrect" and result.misconception is None and told in result.message, result.message


def test_a_module_made_from_the_class_or_by_the_package_is_told_so():
    message = check_my_sink_gate_attention(MySinkGateAttention(8, 2), verbose=False).message
    assert "pass your class itself, MySinkGateAttention, not a module made from it" in message

    class Packaged(mh.MultiHeadSelfAttention):
        def __init__(self, d_model, num_heads, *, bias=True, rope_base=10000.0, **kwargs):
            rope = mh.RotaryEmbedding(d_model // num_heads, base=rope_base)
            super().__init__(d_model, num_heads, qkv_bias=bias, out_bias=bias, causal=True, rope=rope,
                             sink="learned", gate="headwise", **kwargs)  # fmt: skip

    result = check_my_sink_gate_attention(Packaged, verbose=False)
    assert result.correct and result.shortcuts == ("mhsa_helpers.mha.MultiHeadSelfAttention",), result.message
    assert result.message.count("Note:") == 1 and "`mhsa_helpers.mha.MultiHeadSelfAttention`" in result.message
    with pytest.raises(TypeError, match=r"learner must be a function or a class \(your MySinkGateAttention\), got int"):
        check_my_sink_gate_attention(3)


def test_the_packages_attention_called_from_forward_is_noted_and_the_parents_calls_are_not():
    class WithPackage(MySinkGateAttention):
        def forward(self, x, cache=None, need_weights=False):
            out = super().forward(x, cache, need_weights)
            mh.scaled_dot_product_attention(x[:, :1], x[:, :1], x[:, :1])  # a call of the package's, result unused
            return out

    result = check_my_sink_gate_attention(WithPackage, verbose=False)
    assert result.correct and result.shortcuts == ("mhsa_helpers.attention.scaled_dot_product_attention",)

    def forward(self, x, cache=None, need_weights=False):
        mh.scaled_dot_product_attention(x[:, :1], x[:, :1], x[:, :1])
        return MyCausalSelfAttention.forward(self, x, cache, need_weights)

    # Notebook 06's module, calling the package's attention, under its own name.
    calling = type("MyCausalSelfAttention", (MyCausalSelfAttention,), {"forward": forward})
    result = check_my_sink_gate_attention(sink_gate_module(parent=calling), verbose=False)
    assert result.correct and result.shortcuts == (), result.message


@pytest.mark.parametrize("name", [m.name for m in SINK_GATE_MISCONCEPTIONS], ids=selectable)
def test_each_misconception_has_a_symptom_that_does_not_name_it_and_a_fix(name):
    mistake = next(m for m in SINK_GATE_MISCONCEPTIONS if m.name == name)
    assert mistake.symptom and mistake.fix and name not in mistake.symptom
