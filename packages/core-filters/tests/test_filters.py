"""The Filter DSL of seed 000: literals, predicates, hashing, the plugin hook."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bryo_filters import (
    All,
    Any,
    Everything,
    Not,
    Nothing,
    OfType,
    PathContains,
    PathIn,
    WithTag,
    to_predicate,
)
from bryo_plugins import (
    PluginCallbackError,
    PluginError,
    hookimpl,
    new_plugin_manager,
    use_plugin_manager,
)


class Param:
    def __init__(self, value=0):
        self.value = value


class SpecialParam(Param):
    pass


class BatchStat:
    pass


@dataclasses.dataclass
class State:
    """Stands in for VariableState: a value with a `type` attribute."""

    type: type
    value: object = 0


class Tagged:
    def __init__(self, tag):
        self.tag = tag


def test_of_type_matches_instances_and_type_attributes():
    is_param = OfType(Param)
    assert is_param((), Param())
    assert is_param((), SpecialParam())
    assert is_param((), State(type=Param))
    assert is_param((), State(type=SpecialParam))
    assert not is_param((), BatchStat())
    assert not is_param((), State(type=BatchStat))
    assert not is_param((), State(type="not a class"))


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        (..., Everything()),
        (True, Everything()),
        (None, Nothing()),
        (False, Nothing()),
        (Param, OfType(Param)),
        ("dropout", WithTag("dropout")),
        ((Param, "dropout"), Any(OfType(Param), WithTag("dropout"))),
        ([Param, BatchStat], Any(OfType(Param), OfType(BatchStat))),
    ],
)
def test_literals(literal, expected):
    assert to_predicate(literal) == expected


def test_predicates_pass_through():
    predicate = PathContains("kernel")
    assert to_predicate(predicate) is predicate

    def custom(path, value):
        return len(path) == 2

    assert to_predicate(custom) is custom


def test_reprs_read_like_the_seed():
    assert repr(to_predicate((Param, "dropout"))) == "Any(OfType(Param), WithTag('dropout'))"
    assert repr(to_predicate(...)) == "Everything()"
    assert repr(to_predicate(False)) == "Nothing()"
    assert repr(Not(Param)) == "Not(OfType(Param))"


def test_path_contains_exact_and_substring():
    path = ("encoder", "layers", 0, "kernel")
    assert PathContains("kernel")(path, None)
    assert PathContains(0)(path, None)
    assert not PathContains("kern")(path, None)
    assert PathContains("kern", exact=False)(path, None)
    assert PathContains("code", exact=False)(path, None)
    assert not PathContains("bias", exact=False)(path, None)


def test_path_in():
    predicate = PathIn(("a", "b"), ["c"])
    assert predicate(("a", "b"), None)
    assert predicate(("c",), None)
    assert not predicate(("a",), None)


def test_with_tag():
    assert WithTag("dropout")((), Tagged("dropout"))
    assert not WithTag("dropout")((), Tagged("params"))
    assert not WithTag("dropout")((), Param())


def test_combinators():
    value = State(type=Param)
    assert All(Param, PathContains("w"))(("w",), value)
    assert not All(Param, PathContains("w"))(("b",), value)
    assert Any(BatchStat, PathContains("w"))(("w",), value)
    assert Not(BatchStat)((), value)
    assert Everything()((), value) and not Nothing()((), value)


def test_filters_are_hashable_and_key_dicts():
    axes = {to_predicate((Param, "dropout")): 0, to_predicate(...): None}
    assert axes[Any(OfType(Param), WithTag("dropout"))] == 0
    assert axes[Everything()] is None
    assert hash(Not(Param)) == hash(Not(OfType(Param)))
    assert PathIn(("a",)) == PathIn(["a"])


def test_unknown_literal_names_what_is_accepted():
    with pytest.raises(TypeError) as info:
        to_predicate(3.5)
    message = str(info.value)
    assert "`filter` must be one of" in message and "float: 3.5" in message
    assert "a tuple or list of filters" in message


def test_unknown_literal_inside_a_tuple_fails_too():
    with pytest.raises(TypeError, match="float"):
        to_predicate((Param, 2.0))


@dataclasses.dataclass(frozen=True)
class Rank:
    """A new literal kind: values of a given array rank."""

    ndim: int


@dataclasses.dataclass(frozen=True)
class HasRank:
    ndim: int

    def __call__(self, path, value):
        return getattr(value, "ndim", None) == self.ndim


class RankFilters:
    @hookimpl
    def bryo_filter_predicate(self, filter):
        if isinstance(filter, Rank):
            return HasRank(filter.ndim)
        return None


def test_plugins_add_literals(bryo_plugin_manager):
    with pytest.raises(TypeError):
        to_predicate(Rank(2))
    bryo_plugin_manager.register(RankFilters())
    predicate = to_predicate((Rank(2), "tag"))
    assert predicate == Any(HasRank(2), WithTag("tag"))


def test_a_literal_whose_plugin_failed_names_the_plugin(bryo_fake_distributions):
    """It said "`filter` must be one of: ... or a literal a plugin declares" of a literal
    whose plugin is installed and broken."""
    bryo_fake_distributions.add(
        "acme-filters",
        {"acme-filters": "raise ZeroDivisionError('boom')"},
        group="bryo.filters.acme_filters",
    )
    literal_class = type("Rank", (), {"__module__": "acme_filters.literals"})
    with use_plugin_manager(new_plugin_manager()):
        with pytest.warns(RuntimeWarning, match="'acme-filters'"):
            with pytest.raises(PluginError) as raised:
                to_predicate(literal_class())
        with pytest.raises(TypeError, match="a literal a plugin declares"):  # others: as before
            to_predicate(object())
    message = str(raised.value)
    assert "bryo cannot handle `filter` <acme_filters" in message
    assert "plugin 'acme-filters' (distribution acme-filters, entry point group" in message
    assert "bryo.filters.acme_filters) failed to load: ZeroDivisionError: boom" in message


@given(st.lists(st.sampled_from(["a", "b", 0, 1, "kernel"]), max_size=4))
def test_not_is_the_complement(path):
    path = tuple(path)
    for predicate in (PathContains("a"), PathContains("kern", exact=False), PathIn(("a",))):
        assert Not(predicate)(path, None) is not predicate(path, None)
        assert Any(predicate, Not(predicate))(path, None)
        assert not All(predicate, Not(predicate))(path, None)


class _Ambiguous:
    """What a predicate answering an array answers: no truth value."""

    def __bool__(self):
        raise ValueError("ambiguous, as an array's truth")


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        (lambda path, value: 1 / 0, "raised ZeroDivisionError: division by zero on the leaf at w"),
        (lambda path, value: _Ambiguous(), "raised ValueError: ambiguous, as an array's truth"),
    ],
)
def test_a_plugin_predicate_that_fails_on_a_leaf_is_named(bryo_plugin_manager, predicate, expected):
    """It raised ZeroDivisionError (or numpy's "truth value of an array ... is ambiguous")
    from inside `split(model, Rank(2), ...)`, naming neither the plugin nor the leaf."""

    class Broken:
        @hookimpl
        def bryo_filter_predicate(self, filter):
            return predicate if isinstance(filter, Rank) else None

    bryo_plugin_manager.register(Broken(), name="rank-filters")
    with pytest.raises(PluginCallbackError) as raised:
        to_predicate(Rank(2))(("w",), object())
    message = str(raised.value)
    assert "The predicate made of the filter Rank(ndim=2)" in message
    assert "from plugin 'rank-filters', hook `bryo_filter_predicate`" in message
    assert expected in message
    assert isinstance(raised.value.__cause__, ZeroDivisionError | ValueError)
    assert to_predicate(Rank(2)) == predicate  # the named predicate compares as its own
