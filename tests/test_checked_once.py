"""Arguments are checked once, at the door (mhsa_helpers/checks.py, ``arguments_checked``): an entry point
checks what its caller passed, and the public functions it then calls (``split_heads``, ``apply_rotary``,
``attend``, the cache's ``extended``…) skip their own checks; called on their own, they check."""

from __future__ import annotations

import re
import sys
import threading
from collections import Counter

import pytest
import torch
from pinning import raises

from mhsa_helpers import AttentionWeights, MultiHeadSelfAttention, RotaryEmbedding, multi_head_self_attention
from mhsa_helpers.checks import arguments_checked, checking
from mhsa_helpers.heads import split_heads
from mhsa_helpers.kv_cache import KVCache, SlidingWindowCache

CHECKS_FILE = sys.modules["mhsa_helpers.checks"].__file__


def own_name(name: str) -> str:
    """A function's name, also where mutation testing renamed it (``x_name__mutmut_3``, ``xǁClassǁf__mutmut_orig``)."""
    renamed = re.fullmatch(r"(?:x_|xǁ\w+ǁ)(\w+?)__mutmut_\w+", name)
    return name if renamed is None else renamed.group(1)


def callers_of_the_checks(call) -> Counter[str]:
    """Which functions called into ``checks.py`` (its ``expect_*`` words) while ``call()`` ran, and how often."""
    callers: Counter[str] = Counter()

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename == CHECKS_FILE and own_name(code.co_name).startswith("expect_"):
            caller = frame.f_back
            while "mutmut" in caller.f_code.co_filename:  # mutation testing's switch between a function's versions
                caller = caller.f_back
            callers[own_name(caller.f_code.co_name)] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return callers


def only_the_door(callers: Counter[str], door: str) -> set[str]:
    """The callers other than the door itself and the ``expect_*`` helpers it calls."""
    return {name for name in callers if name != door and not name.startswith("expect_")}


# Each case builds its cache: an instance in the parameters would keep its keys from one run of the tests to the next.
@pytest.mark.parametrize(
    "new_cache", [lambda: None, KVCache, lambda: KVCache(16), lambda: SlidingWindowCache(4, 1)], ids=range(4)
)
def test_a_forward_checks_at_its_door_and_nothing_it_calls_checks_again(new_cache):
    cache = new_cache()
    torch.manual_seed(0)
    module = MultiHeadSelfAttention(
        16, 4, num_kv_heads=2, causal=True, rope=RotaryEmbedding(4), sink="learned", gate="headwise"
    )
    x = torch.randn(2, 3, 16)
    if cache is not None:
        module(x, cache=cache)  # keys held: the door's checks of the cache run in full
    mask = torch.ones(3, 3 if cache is None else cache.held + 3, dtype=torch.bool)
    callers = callers_of_the_checks(lambda: module(x, mask=mask, cache=cache, need_weights=True))
    assert callers["expect_call"] >= 1  # the door checked
    assert only_the_door(callers, "forward") == set()
    assert checking()  # and the door is closed again


def test_the_functional_form_checks_at_its_door_and_nothing_it_calls_checks_again():
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 8), torch.randn(8, 8)
    k_weight = torch.randn(4, 8)
    mask, rope = torch.ones(3, 3, dtype=torch.bool), RotaryEmbedding(4, 8)

    def call():
        return multi_head_self_attention(
            x, AttentionWeights(w, k_weight, k_weight, w), num_heads=2, num_kv_heads=1, causal=True,
            rope=rope, mask=mask, need_weights=True,
        )  # fmt: skip

    callers = callers_of_the_checks(call)
    assert callers["multi_head_self_attention"] >= 1
    assert only_the_door(callers, "multi_head_self_attention") == set()


def test_on_their_own_the_functions_check_and_inside_a_checked_call_they_do_not():
    with raises(ValueError, "x must have at least 2 dimensions (..., seq, d_model), got shape (3,)"):
        split_heads(torch.zeros(3), 1)
    with arguments_checked():
        assert not checking()
        with pytest.raises(IndexError):  # PyTorch's own complaint: the words are the door's job
            split_heads(torch.zeros(3), 1)
    assert checking()


def test_the_door_closes_after_an_error_and_after_a_nested_door():
    with pytest.raises(ZeroDivisionError), arguments_checked():
        1 / 0  # noqa: B018 (an error inside the body: the context must still be left)
    assert checking()
    with arguments_checked():
        with arguments_checked():
            pass
        assert not checking()  # the outer call's body is still checked
    assert checking()


def test_an_error_inside_a_forward_leaves_the_functions_checking():
    module = MultiHeadSelfAttention(8, 2)

    def fail(*args):
        raise RuntimeError("a hook failed")

    module.qkv_proj.register_forward_hook(fail)
    with pytest.raises(RuntimeError, match="a hook failed"):
        module(torch.randn(1, 2, 8))
    assert checking()


def test_another_thread_keeps_checking_while_a_forward_runs():
    seen = []
    with arguments_checked():
        thread = threading.Thread(target=lambda: seen.append(checking()))
        thread.start()
        thread.join()
    assert seen == [True]


@pytest.mark.parametrize(
    ("new_cache", "fed", "message"),
    [
        (KVCache, 3, "mask must be broadcastable to (..., seq_q, seq_k) = (1, 4, 2, 5), got shape (2, 4)"),
        # a window of 3 after 6 tokens holds the keys of positions 4 and 5: 2 + 2 keys, not 6 + 2
        (
            lambda: SlidingWindowCache(3),
            6,
            "mask must be broadcastable to (..., seq_q, seq_k) = (1, 4, 2, 4), got shape (2, 8)",
        ),
    ],
    ids=["kv-cache", "sliding-window"],
)
def test_the_door_checks_the_mask_against_the_keys_the_cache_holds(new_cache, fed, message):
    cache = new_cache()
    module = MultiHeadSelfAttention(8, 4, causal=True)
    module(torch.randn(1, fed, 8), cache=cache)
    wrong = torch.ones(2, 4 if fed == 3 else 8, dtype=torch.bool)
    with raises(ValueError, message):
        module(torch.randn(1, 2, 8), mask=wrong, cache=cache)
