"""The exercise checker (mhsa_helpers.teaching.checking) notices a learner's function that changes its
arguments in place, wherever the change is: a tensor or a number inside a list or a dict, an object's
attribute (public or private), a module's setting; and it does not blame the learner for what it did
not change (a module's own cache, an argument that refers to itself, a dtype). Found unpinned by
mutation testing (``make mutate``).

A learner cares because the caller's tensor changes too: the notebook's next cell then works on
different numbers than the ones printed above it.

Written against the public API only: ``check_function`` with ``Case`` and ``Misconception`` objects.
"""

from __future__ import annotations

import time

import torch

import mhsa_helpers.teaching.checking as checking
from mhsa_helpers.teaching.checking import IN_PLACE, Case, Misconception, check_function


def check(learner, argument, reference=lambda value: 0, **kwargs):
    """The result of ``learner`` on one case whose only argument is ``argument`` (the learner's answer
    is right whenever it returns what ``reference`` does)."""
    return check_function("ex", learner, reference, [Case((argument,), kwargs)], verbose=False)


def written_into(name: str, at: str) -> str:
    """The message for a learner who wrote into the tensor or value at ``{name}{at}``."""
    return (
        f"[ex] not yet: your function changed its argument `{name}` (at `{name}{at}`) in place (e.g. "
        f"`{name} /= …`, `{name}.masked_fill_(…)`, `{name}[…] = …`), so the caller's tensor changed too. "
        f"Work on a copy: `{name} = {name} / …`, `masked_fill` without the underscore, or `{name}.clone()` first."
    )


def object_changed(name: str, part: str) -> str:
    """The message for a learner who changed ``{name}.{part}`` of an object argument."""
    return (
        f"[ex] not yet: your function changed its argument `{name}` in place: `{name}.{part}` is not what it "
        f"was (e.g. `{name}.{part}.neg_()`, `{name}.{part} = …`), and the caller's object changed too. "
        f"Leave `{name}` as it is; make new tensors from what it gives you."
    )


class Holder:
    """An object argument, like a RotaryEmbedding: its attributes are the learner's to read, not to change."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)


# ------------------------------------------------------------------ inside lists and dicts


def test_a_tensor_changed_inside_a_list_is_named_by_its_index():
    def learner(pair):
        pair[1].mul_(2)
        return 0

    result = check(learner, [torch.ones(2), torch.ones(2), 3])
    assert result.exercise == "ex" and result.misconception == IN_PLACE
    assert result.message == written_into("pair", "[1]")


def test_a_number_replaced_inside_a_list_is_named_by_its_index():
    def learner(pair):
        pair[2] = 4
        return 0

    assert check(learner, [torch.ones(2), torch.ones(2), 3]).message == written_into("pair", "[2]")


def test_a_number_replaced_by_a_tensor_is_a_change():
    """Was a bug: a plain value that cannot be compared with what replaced it (``3 == tensor([1., 1.])``
    raises) counted as unchanged, so this learner's edit of the caller's list was accepted."""

    def learner(pair):
        pair[2] = torch.ones(2)
        return 0

    assert check(learner, [torch.ones(2), torch.ones(2), 3]).message == written_into("pair", "[2]")


def test_a_list_and_a_dict_of_tensors_and_numbers_left_alone_are_fine():
    def total(values):
        items = values.values() if isinstance(values, dict) else values
        return sum(
            float(v.sum()) if isinstance(v, torch.Tensor) else v for v in items if isinstance(v, int | torch.Tensor)
        )

    assert check(total, [torch.ones(2), 3, "three", None], reference=lambda v: 5.0).correct
    assert check(total, {"q": torch.ones(2), "n": 3}, reference=lambda v: 5.0).correct


def test_a_tensor_changed_inside_a_dict_is_named_by_its_key():
    def learner(weights):
        weights["q"].zero_()
        return 0

    assert check(learner, {"n": 3, "q": torch.ones(2)}).message == written_into("weights", "['q']")


def test_arguments_are_looked_into_three_containers_deep():
    """The documented bound (``_tensors_of``): a tensor three containers deep is watched, one four deep
    is not (the bound keeps the look at a large or self-referring argument short)."""

    def learner(nested):
        inner = nested
        while isinstance(inner, list):
            inner = inner[0]
        inner.add_(1)
        return 0

    three, four = [[[torch.ones(2)]]], [[[[torch.ones(2)]]]]
    assert check(learner, three).message == written_into("nested", "[0][0][0]")
    assert check(learner, four).correct


def test_dicts_are_looked_into_three_containers_deep_too():
    def learner(weights):
        weights["block"]["heads"][0].add_(1)
        return 0

    assert check(learner, {"block": {"heads": [torch.ones(2)]}}).message == written_into(
        "weights", "['block']['heads'][0]"
    )


def test_a_dict_that_refers_to_itself_is_checked_without_end():
    config = {"scale": torch.ones(2)}
    config["self"] = config
    result = check(lambda c: c["scale"].sum(), config, reference=lambda c: torch.tensor(2.0))
    assert result.correct, result.message


# ------------------------------------------------------------------ objects and modules


def test_a_tensor_changed_deep_inside_an_object_is_named_by_its_path():
    def learner(model):
        model.block.attention.scale.mul_(2)
        return 0

    argument = Holder(block=Holder(attention=Holder(scale=torch.ones(1))))
    assert check(learner, argument).message == object_changed("model", "block.attention.scale")


def test_an_attribute_named_x_keeps_its_name():
    def learner(data):
        data.X.neg_()
        return 0

    assert check(learner, Holder(X=torch.ones(2))).message == object_changed("data", "X")


def test_a_private_attribute_of_an_object_is_watched_too():
    def learner(rope):
        rope._cos.zero_()
        return 0

    assert check(learner, Holder(_cos=torch.ones(2))).message == object_changed("rope", "_cos")


def test_a_modules_setting_is_watched_and_its_own_bookkeeping_is_not():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)
            self.scale = 2.0
            self._calls = 0  # the module's own cache: changes whenever it is called

        def forward(self, x):
            self._calls += 1
            return self.linear(x) * self.scale

    x = torch.ones(1, 2)

    def uses(module):
        return module(x)

    def retunes(module):
        module.scale = 3.0
        return module(x) * 2 / 3

    reference = lambda module: module(x)  # noqa: E731 - a one-line reference, as a learner writes it
    assert check(uses, Scaled(), reference=reference).correct, "calling the module is not changing it"
    assert check(retunes, Scaled(), reference=reference).message == object_changed("module", "scale")


def test_an_object_that_refers_to_itself_is_checked_without_end():
    node = Holder(value=torch.ones(2))
    node.parent = node
    assert check(lambda tree: tree.value.sum(), node, reference=lambda tree: torch.tensor(2.0)).correct


def test_an_argument_without_attributes_is_fine():
    # A dtype (no __dict__) passed as a keyword: nothing to watch, nothing to fail on.
    result = check(
        lambda x, dtype: x.to(dtype), torch.ones(2), reference=lambda x, dtype: x.to(dtype), dtype=torch.float64
    )
    assert result.correct, result.message


# ------------------------------------------------------------------ NaN


def test_nan_written_into_an_argument_is_a_change():
    def learner(x):
        total = x.sum()
        x[0] = float("nan")
        return total

    result = check(learner, torch.ones(3), reference=lambda x: x.sum())
    assert result.misconception == IN_PLACE
    assert result.message.startswith("[ex] not yet: your function changed its argument `x` in place (e.g. `x /= …`")


def test_nan_in_a_setting_is_equal_to_nan_only():
    nan = float("nan")

    def sets(value):
        def learner(config):
            config.eps = value
            return 0

        return learner

    def reads(config):
        return 0

    assert check(reads, Holder(eps=nan)).correct, "NaN left as it was is unchanged"
    assert check(sets(nan), Holder(eps=1.0)).message == object_changed("config", "eps")
    assert check(sets(0.5), Holder(eps=nan)).message == object_changed("config", "eps")


# ------------------------------------------------------------------ what a probe sees


def test_a_probe_passes_keyword_arguments_to_the_learner():
    def learner(x, scale=1.0):
        return x * scale + 1

    def adds_one(run):  # the symptom: one more than the reference, whatever the scale
        return bool(torch.equal(run(torch.ones(1), scale=3.0), torch.full((1,), 4.0)))

    case = Case((torch.ones(2),), {"scale": 2.0})
    mistakes = [Misconception("added one", None, "hint", detect=adds_one)]
    result = check_function("ex", learner, lambda x, scale=1.0: x * scale, [case], mistakes, verbose=False)
    assert result.misconception == "added one", result.message


def test_a_probe_that_catches_the_learners_failure_sees_what_happened(monkeypatch):
    """A ``detect`` probe runs the learner itself; when that call fails, the error it catches says why:
    the name of the argument changed in place, or where the learner was stopped."""
    monkeypatch.setattr(checking, "TIME_LIMIT_SECONDS", 0.1)
    seen = []

    def learner(x):  # the case's input (2 numbers) runs; the probe's inputs change it or never return
        if len(x) == 3:
            x.mul_(2)
        if len(x) == 4:
            time.sleep(5)
        return 3 * x

    def probe(run):
        for size in (3, 4):
            try:
                run(torch.ones(size))
            except Exception as error:
                seen.append(str(error))
        return False

    mistakes = [Misconception("m", None, "h", detect=probe)]
    result = check_function("ex", learner, lambda x: x, [Case((torch.ones(2),))], mistakes, verbose=False)
    assert result.status == "incorrect"
    assert seen[0] == "x"
    assert seen[1].startswith(" (in learner, line ") and seen[1].endswith(": `time.sleep(5)`)"), seen


def test_an_attribute_deleted_from_an_argument_is_a_change():
    class Table:
        def __init__(self):
            self.angles = torch.ones(3)
            self.base = 10000.0

    def learner(table):
        del table.base  # "not needed any more"
        return 0

    assert check(learner, Table()).message == object_changed("table", "base")
