"""The static attributes an NNX module's calls record in MoX are its own, call by call:
`static_attributes` keeps its answers by the module's layout and recorded values (so a
model's many modules of one kind cost a lookup each), and no answer leaks to a module
whose values differ, however little."""

import math

from bryo import nnx
from bryo_nnx._intercept import static_attributes


class Knobs(nnx.Module):
    def __init__(self, value: object, shape: tuple = (1, 2)) -> None:
        self.value = value
        self.shape_axes = shape
        self.weight = nnx.Param(0.0)

    def __call__(self, x):
        return x


def test_modules_of_one_class_get_their_own_values():
    assert static_attributes(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))["features"] == 3
    assert static_attributes(nnx.Linear(4, 5, rngs=nnx.Rngs(0)))["features"] == 5


def test_values_that_compare_equal_are_told_apart():
    """`True == 1 == 1.0` and `0.0 == -0.0`: each module reports its own."""
    assert type(static_attributes(Knobs(True))["value"]) is bool
    assert type(static_attributes(Knobs(1))["value"]) is int
    assert type(static_attributes(Knobs(1.0))["value"]) is float
    assert math.copysign(1.0, static_attributes(Knobs(0.0))["value"]) == 1.0
    assert math.copysign(1.0, static_attributes(Knobs(-0.0))["value"]) == -1.0
    assert math.isnan(static_attributes(Knobs(float("nan")))["value"])
    assert static_attributes(Knobs(0, (True, 2)))["shape_axes"] == (True, 2)
    assert type(static_attributes(Knobs(0, (1, 2)))["shape_axes"][0]) is int
    assert "shape_axes" not in static_attributes(Knobs(0, (1, [2])))  # not recordable


def test_a_changed_module_reports_its_new_values():
    module = Knobs(3)
    assert static_attributes(module)["value"] == 3
    module.value = "relu"
    assert static_attributes(module)["value"] == "relu"
    module.value = nnx.Linear(1, 1, rngs=nnx.Rngs(0))  # a submodule: not an attribute
    assert "value" not in static_attributes(module)


def test_the_answer_is_a_fresh_dict():
    module = Knobs(3)
    static_attributes(module)["value"] = 4
    assert static_attributes(module)["value"] == 3


def test_a_changed_alias_table_is_seen(monkeypatch):
    layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert static_attributes(layer)["features"] == 3
    monkeypatch.setattr(nnx.Linear, "_mox_aliases", {"width": "out_features"})
    attrs = static_attributes(layer)
    assert attrs["width"] == 3 and "features" not in attrs


def test_each_module_reports_its_own_variables_sharding():
    def sharded(axes):
        module = Knobs(0)
        module.weight = nnx.Param(0.0, out_sharding=axes)
        return static_attributes(module)

    assert sharded(("embed",))["weight_sharding"] == ("embed",)
    assert sharded(("mlp",))["weight_sharding"] == ("mlp",)
    assert "weight_sharding" not in static_attributes(Knobs(0))
