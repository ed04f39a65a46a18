"""The rules of the shared checker machinery (mhsa_helpers.teaching.checking) on tiny made-up exercises:
whole numbers, outputs, copies of the arguments, the time limit outside the main thread, several
fitting mistakes, probes, the checker's own failures, the learner's signature, and the pieces that drive a
learner's class (whose code is the learner's, what raised, the loose comparison, the memo and the driver)."""

from __future__ import annotations

import functools
import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

import mhsa_helpers.teaching.checking as checking
from mhsa_helpers import MultiHeadSelfAttention
from mhsa_helpers.teaching.checking import (
    AnswerRejected,
    Case,
    Misconception,
    Remembered,
    check_function,
    class_driver,
    judge_class,
    output_tensor,
    own_code,
    raised_outside,
    roughly_equal,
)

BYTES_CASES = [Case((100_000, 3), description="100000 tokens, 3 bytes each")]


def product(tokens, size):
    return tokens * size


# ------------------------------------------------------------------ whole numbers


@pytest.mark.parametrize(
    "answer",
    [
        lambda t, s: np.prod([t, s]),  # numpy.int64
        lambda t, s: np.int32(t) * np.int32(s),
        lambda t, s: float(t * s),  # a float that is a whole number
        lambda t, s: torch.tensor(t * s),  # a 0-d integer tensor
        lambda t, s: t * s,
    ],
    ids=["np.prod", "np.int32", "float", "0-d tensor", "int"],
)
def test_a_whole_number_in_any_form_is_accepted(answer):
    assert check_function("bytes", answer, product, BYTES_CASES, verbose=False).correct


def test_whole_numbers_are_compared_exactly_even_when_large():
    # one token too many: a relative tolerance of 1e-4 would accept it at 100,000 tokens
    result = check_function("bytes", lambda t, s: (t + 1) * s, product, BYTES_CASES, verbose=False)
    assert result.status == "incorrect"
    assert "returned 300003, expected 300000 (off by 3)" in result.message
    half = check_function("bytes", lambda t, s: t * s + 0.5, product, BYTES_CASES, verbose=False)
    assert "returned 300000.5, expected the whole number 300000" in half.message
    listed = check_function("bytes", lambda t, s: [t * s], product, BYTES_CASES, verbose=False)
    assert "returned a list of 1 item, expected a number" in listed.message


def test_integer_tensors_are_compared_exactly():
    cases = [Case((torch.tensor([20_000, 30_000]),))]
    off = check_function("tokens", lambda x: x + 1, lambda x: x.clone(), cases, verbose=False)
    assert off.status == "incorrect" and "largest difference 1" in off.message


# ------------------------------------------------------------------ arguments


def test_the_reference_gets_its_own_copy_of_an_object_argument():
    class Scale:
        def __init__(self):
            self.factor = torch.tensor(2.0)

    def reference(x, scale):
        return x * scale.factor

    def learner(x, scale):
        scale.factor = torch.tensor(3.0)  # replaces the object's tensor, then uses it
        return x * scale.factor

    cases = [Case((torch.ones(2), Scale()))]
    result = check_function("scale", learner, reference, cases, verbose=False)
    assert result.status == "misconception" and result.misconception == checking.IN_PLACE
    assert "`scale.factor` is not what it was" in result.message
    assert cases[0].args[1].factor.item() == 2.0  # the case itself is untouched


def test_a_call_that_does_not_fit_the_learners_parameters_is_said_so():
    result = check_function("demo", lambda x, y: x + y, lambda x: 2 * x, [Case((torch.ones(2),))], verbose=False)
    assert result.status == "error"
    assert "your function takes (x, y), but the exercise calls it with 1 argument(s)" in result.message


# ------------------------------------------------------------------ who failed


def test_the_checkers_own_failure_is_not_blamed_on_the_learner():
    def buggy_wrapper(function):
        def wrapped(*args):
            return function(*args).no_such_method()  # a bug in the checker's own code

        wrapped.__wrapped__ = function
        return wrapped

    learner = buggy_wrapper(lambda x: 2 * x)
    result = check_function("demo", learner, lambda x: 2 * x, [Case((torch.ones(2),))], verbose=False)
    assert result.status == "error"
    assert "the checker itself failed (AttributeError" in result.message and "not in your code" in result.message
    assert "your function raised" not in result.message


def test_answer_rejected_is_a_plain_not_yet():
    def wrapper(function):
        def wrapped(*args):
            value = function(*args)
            if value.dtype != torch.bool:
                raise AnswerRejected("return a boolean mask")
            return value

        wrapped.__wrapped__ = function
        return wrapped

    result = check_function(
        "mask", wrapper(lambda n: torch.ones(n, n)), lambda n: torch.ones(n, n, dtype=torch.bool), [Case((2,))]
    )
    assert result.status == "incorrect" and result.message.startswith("[mask] not yet: return a boolean mask.")


# ------------------------------------------------------------------ naming mistakes


def test_a_probe_tells_apart_two_mistakes_with_the_same_numbers():
    cases = [Case((torch.tensor([1.0, 2.0]),))]

    def doubled(x):
        return 2 * x

    # Both give 2x on the cases; only a probe at x = -1 tells a doubling from an abs-then-double.
    misconceptions = [
        Misconception(
            "abs then doubled", lambda x: 2 * x.abs(), "h1", detect=lambda run: run(torch.tensor([-1.0])) > 0
        ),
        Misconception("doubled", lambda x: 2 * x, "h2", detect=lambda run: run(torch.tensor([-1.0])) < 0),
    ]
    result = check_function("demo", doubled, lambda x: x + 1, cases, misconceptions, verbose=False)
    assert result.misconception == "doubled" and "several" not in result.message


def test_a_symptom_names_a_close_variant_only_when_nothing_fits_exactly():
    cases = [Case((torch.tensor([1.0, 2.0]),))]
    misconceptions = [
        Misconception("tripled", lambda x: 3 * x, "exactly 3x"),
        Misconception("grew too much", None, "more than x + 1", detect=lambda run: bool(run(torch.tensor([5.0])) > 6)),
    ]
    assert check_function(
        "demo", lambda x: 3 * x, lambda x: x + 1, cases, misconceptions, verbose=False
    ).misconception == ("tripled")
    variant = check_function("demo", lambda x: 3.5 * x, lambda x: x + 1, cases, misconceptions, verbose=False)
    assert variant.misconception == "grew too much" and "more than x + 1" in variant.diagnosis
    unrelated = check_function("demo", lambda x: x - 1, lambda x: x + 1, cases, misconceptions, verbose=False)
    assert unrelated.status == "incorrect"


# ------------------------------------------------------------------ the time limit without a signal


def test_the_time_limit_also_holds_outside_the_main_thread(monkeypatch):
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.2)
    results = []

    def slow(x):
        deadline = time.monotonic() + 1.5  # ends by itself, so the test leaves no thread spinning
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return x

    worker = threading.Thread(target=lambda: results.append(check_function("demo", slow, lambda x: x, [Case((1,))])))
    start = time.monotonic()
    worker.start()
    worker.join(5)
    assert time.monotonic() - start < 1.4  # stopped waiting at the limit, not when the loop ended
    assert results and results[0].status == "error"
    assert "did not return within 0.2 s" in results[0].message and "(in slow, line" in results[0].message


def test_a_right_answer_runs_once_per_case_so_its_prints_are_not_doubled(capsys):
    def softmax_that_prints(x):
        print("shape", tuple(x.shape))
        return torch.softmax(x, dim=-1)

    cases = [Case((torch.ones(2, 3),)), Case((torch.ones(4, 3),))]
    result = check_function(
        "demo", softmax_that_prints, lambda x: torch.softmax(x, -1), cases, shortcuts=("softmax",), verbose=False
    )
    assert result.correct and result.shortcuts == ("torch.softmax",)
    assert capsys.readouterr().out == "shape (2, 3)\nshape (4, 3)\n"


def test_an_outer_alarm_is_given_back_after_the_check():
    import signal

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        assert check_function("demo", lambda x: x, lambda x: x, [Case((torch.ones(2),))], verbose=False).correct
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < remaining <= 0.3
        time.sleep(0.5)
        assert fired == [True]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_noted_appends_the_note_to_every_text_said_and_records_the_shortcuts():
    told = checking.CheckResult("x", "misconception", "not yet.", symptom="differs.", diagnosis="", fix="do this.")
    result = checking.noted(told, " Note: n.", ("a.b", "c.d"))
    assert (result.message, result.symptom, result.diagnosis) == ("not yet. Note: n.", "differs. Note: n.", "")
    assert result.shortcuts == ("a.b", "c.d") and result.fix == "do this." and result.status == "misconception"


# ------------------------------------------------------------------ driving a learner's class


def unwritten_helper():
    raise NotImplementedError


class LearnersParent(nn.Module):
    """The learner's class that another of theirs extends; its grandparent, nn.Module, is torch's."""

    def __init__(self, d_model):
        super().__init__()
        self.d_model = d_model

    def forward(self, x):
        raise NotImplementedError

    @property
    def width(self):
        return self.d_model


class LearnersChild(LearnersParent):
    def __init__(self, d_model, *, written=True):
        super().__init__(d_model)
        if not written:
            unwritten_helper()

    def forward(self, x):
        raise NotImplementedError

    @staticmethod
    def helper():
        return 1

    @property
    def height(self):
        return 2


class ParentNotWritten(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        raise NotImplementedError


class ChildOfUnwritten(ParentNotWritten):
    def __init__(self, d_model):
        super().__init__(d_model)


def codes(*functions):
    return {function.__code__ for function in functions}


def test_own_code_is_the_class_own_methods_or_with_inherited_those_of_the_learners_classes_it_extends():
    child = codes(
        LearnersChild.__init__, LearnersChild.forward, LearnersChild.helper, LearnersChild.height.fget
    )  # a staticmethod's and a property's code too
    parent = codes(LearnersParent.__init__, LearnersParent.forward, LearnersParent.width.fget)
    assert own_code(LearnersChild) == child
    assert own_code(LearnersChild, inherited=True) == child | parent  # not nn.Module's, which is torch's
    assert own_code(LearnersParent, inherited=True) == parent
    assert own_code(nn.Linear, inherited=True) == set()  # every class of its MRO is torch's (or object)

    class OnThePackage(MultiHeadSelfAttention):  # the package's class is no code of the learner's either
        def extra_repr(self):
            return "mine"

    assert own_code(OnThePackage, inherited=True) == {OnThePackage.extra_repr.__code__}


def test_own_code_of_a_function_is_its_code_and_of_anything_else_nothing():
    def build(d_model):
        return LearnersChild(d_model)

    assert own_code(build) == {build.__code__} == own_code(build, inherited=True)
    assert own_code(functools.partial(build, 4)) == set()


def raised(call):
    with pytest.raises(NotImplementedError) as caught:
        call()
    return caught.value


def test_raised_outside_is_none_for_the_learners_own_stub_and_for_torch():
    own = own_code(LearnersChild)
    assert raised_outside(raised(lambda: LearnersChild(4).forward(None)), own) is None
    # nn.Module's forward, never overridden, raises from torch's own file.
    assert raised_outside(raised(lambda: nn.Module()(torch.ones(1))), own) is None
    assert raised_outside(NotImplementedError(), own) is None  # never raised: no traceback


def test_raised_outside_names_the_code_outside_the_learners_own_that_raised():
    own = own_code(LearnersChild)
    assert raised_outside(raised(lambda: LearnersChild(4, written=False)), own) == "unwritten_helper"
    # The parent's stub is outside the class's own code, and inside it with the inherited methods.
    assert raised_outside(raised(lambda: LearnersParent(4).forward(None)), own) == "LearnersParent.forward"
    assert (
        raised_outside(raised(lambda: LearnersParent(4).forward(None)), own_code(LearnersChild, inherited=True)) is None
    )


def test_output_tensor_passes_a_tensor_and_rejects_anything_else_saying_what_it_got():
    tensor = torch.ones(2)
    assert output_tensor(tensor, "your forward") is tensor
    with pytest.raises(AnswerRejected) as rejected:
        output_tensor((tensor, tensor), "your forward")
    assert str(rejected.value) == "your forward returned tuple, not the output tensor alone"


def test_roughly_equal_is_loose_scaled_by_the_largest_magnitude_and_strict_on_shape():
    want = torch.tensor([1000.0, 0.0], dtype=torch.float64)
    assert roughly_equal(want.clone(), want)
    assert not roughly_equal(want.reshape(1, 2), want)  # the same values, in another shape
    assert not roughly_equal(want[:1], want)
    # atol is 1e-4 of the largest magnitude (0.1 here), so 0.05 off at the 0 passes and 0.2 off does not.
    assert roughly_equal(want + torch.tensor([0.0, 0.05], dtype=torch.float64), want)
    assert not roughly_equal(want + torch.tensor([0.0, 0.2], dtype=torch.float64), want)
    small = torch.zeros(3, dtype=torch.float64)  # the scale is at least 1
    assert roughly_equal(small + 5e-5, small) and not roughly_equal(small + 2e-4, small)
    assert roughly_equal(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64))  # any dtype
    # And 1e-3 relative: 0.5 off at 1000 passes (0.1 + 1.0 allowed), 2 off does not, nor half of a value off.
    assert roughly_equal(want + torch.tensor([0.5, 0.0], dtype=torch.float64), want)
    assert not roughly_equal(want + torch.tensor([2.0, 0.0], dtype=torch.float64), want)
    assert not roughly_equal(torch.tensor([1.5]), torch.tensor([1.0]))


def test_remembered_computes_once_per_key_and_input_and_hands_out_copies():
    calls = []

    def compute():
        calls.append(1)
        return (torch.arange(3.0, requires_grad=True) * 2,)

    remembered = Remembered(8)
    x = torch.ones(2, 3)
    (first,) = remembered(("reference",), x, compute)
    assert not first.requires_grad  # kept detached
    first.add_(100.0)  # what a caller does to it reaches no later call
    (second,) = remembered(("reference",), x.clone(), compute)
    assert torch.equal(second, torch.tensor([0.0, 2.0, 4.0])) and len(calls) == 1
    second.add_(100.0)
    assert torch.equal(remembered(("reference",), x, compute)[0], torch.tensor([0.0, 2.0, 4.0]))
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("key", "x"),
    [
        (("reference",), torch.zeros(2, 3, dtype=torch.int32)),  # another dtype, the same bytes
        (("reference",), torch.zeros(3, 2)),  # another shape, the same bytes
        (("reference",), torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])),  # another value
        (("mistake",), torch.zeros(2, 3)),  # another key
    ],
    ids=["dtype", "shape", "values", "key"],
)
def test_remembered_computes_again_for_another_key_or_input(key, x):
    calls = []

    def compute():
        calls.append(1)
        return (torch.zeros(1),)

    remembered = Remembered(8)
    remembered(("reference",), torch.zeros(2, 3), compute)
    remembered(key, x, compute)
    assert len(calls) == 2


def test_remembered_lets_the_oldest_go_past_its_limit():
    calls = []

    def compute():
        calls.append(1)
        return (torch.zeros(1),)

    remembered = Remembered(2)
    x = torch.ones(2)
    for name in ("a", "b", "c"):
        remembered((name,), x, compute)
    assert len(calls) == 3
    remembered(("c",), x, compute)
    remembered(("b",), x, compute)
    assert len(calls) == 3  # the two newest are kept
    remembered(("a",), x, compute)
    assert len(calls) == 4  # the oldest was let go


def said_not_written(where, error):
    return f"{where} still raises NotImplementedError ({type(error).__name__})."


def build_and_run(learner, x, size, probe, told):
    module = learner(size)
    return module(x) if not probe else {"probe": probe, "module": module}


def test_the_driver_passes_its_arguments_through_and_leaves_the_global_generator_as_it_was():
    seen = []

    def drive_once(learner, x, size, probe, told):
        seen.append((learner, size, probe, told))
        nn.Linear(size, size)  # building draws initial weights from the global generator
        return torch.randn(2)

    told: dict[str, str] = {}
    drive = class_driver(LearnersChild, told, drive_once, said_not_written)
    torch.manual_seed(3)
    before = torch.random.get_rng_state()
    drive(torch.ones(1, 4), 4)
    drive(torch.ones(1, 4), 4, probe=True)
    drive(torch.ones(1, 4), 4, False)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert seen == [(LearnersChild, 4, probe, told) for probe in (None, True, False)]


def test_the_driver_lets_a_stub_of_the_learners_own_class_through():
    told: dict[str, str] = {}
    drive = class_driver(LearnersChild, told, build_and_run, said_not_written)
    with pytest.raises(NotImplementedError):
        drive(torch.ones(1, 4), 4)
    # The parent's stub is the learner's own code when the inherited methods are.
    inherited = class_driver(ChildOfUnwritten, told, build_and_run, said_not_written, inherited=True)
    with pytest.raises(NotImplementedError):
        inherited(torch.ones(1, 4), 4)
    assert told == {}


@pytest.mark.parametrize("not_probing", [None, False])
def test_the_driver_tells_code_outside_the_class_that_still_raises_and_keeps_it_only_when_not_probing(not_probing):
    told: dict[str, str] = {}
    drive = class_driver(ChildOfUnwritten, told, build_and_run, said_not_written)
    expected = "ParentNotWritten.__init__ still raises NotImplementedError (NotImplementedError)."
    with pytest.raises(AnswerRejected) as probed:
        drive(torch.ones(1, 4), 4, probe=("built",))
    assert str(probed.value) == expected and isinstance(probed.value.__cause__, NotImplementedError)
    assert told == {}  # a probe's failure is no verdict on the answer
    with pytest.raises(AnswerRejected) as rejected:
        drive(torch.ones(1, 4), 4, probe=not_probing)
    assert str(rejected.value) == expected and told == {"not written": expected}


# ------------------------------------------------------------------ judging a learner's class


class Scaler(nn.Module):
    """A learner's class of the right shape: ``Scaler(size)(x)`` is ``x * size``."""

    def __init__(self, size):
        super().__init__()
        self.size = size

    def forward(self, x):
        return x * self.size, x.sum(-1)


class ScalerSecondWrong(Scaler):
    def forward(self, x):
        return x * self.size, x.sum(-1) + 1


def scaled(x, size, probe=None):
    return x * size, x.sum(-1)


SCALER_CASES = [Case((torch.arange(6.0).reshape(2, 3), 3), description="3 on a 2x3 x")]


def judge_scaler(learner, **options):
    return judge_class("Scaler", learner, "MyScaler", build_and_run, said_not_written, scaled, SCALER_CASES, **options)


def test_judging_a_class_builds_it_for_each_case_and_returns_what_the_drive_was_told():
    result, told = judge_scaler(Scaler)
    assert (result.status, told) == ("correct", {})
    wrong, _ = judge_scaler(ScalerSecondWrong, output_names=("the scaled x", "the row sums"))
    assert wrong.status == "incorrect" and "the row sums" in wrong.symptom and "the scaled x" not in wrong.symptom


def test_judging_a_class_draws_its_further_cases_from_the_answers_own_seed():
    seeds = []

    def draw(seed):
        seeds.append(seed)
        return [Case((torch.ones(1, 2), 5), description="drawn")]

    result, _ = judge_scaler(Scaler, draw=draw)
    assert result.status == "correct" and seeds == [checking.answer_seed(Scaler)]


def test_judging_a_module_made_from_the_class_asks_for_the_class_and_what_is_not_callable_is_refused():
    result, told = judge_scaler(Scaler(2))
    assert result.status == "error" and told == {}
    assert result.message == "[Scaler] not yet: pass your class itself, Scaler, not a module made from it."
    block, _ = judge_scaler(Scaler(2), made="block")
    assert block.message == "[Scaler] not yet: pass your class itself, Scaler, not a block made from it."
    with pytest.raises(TypeError) as refused:
        judge_scaler(3)
    assert str(refused.value) == "learner must be a function or a class (your MyScaler), got int"


def test_judging_a_class_whose_parent_still_raises_says_where_to_write_unless_the_parent_is_its_own_code():
    result, told = judge_scaler(ChildOfUnwritten)
    said = "ParentNotWritten.__init__ still raises NotImplementedError (NotImplementedError)."
    assert result.status == "not_attempted" and result.message == f"[Scaler] not attempted yet: {said}"
    assert told == {"not written": said}
    # with the inherited methods as its own code, the stub is the answer's own: not attempted, as judge says it
    own, told = judge_scaler(ChildOfUnwritten, inherited=True)
    assert own.status == "not_attempted" and told == {} and said not in own.message
