"""`Module`: the NNX-style module, a mutable object whose attributes are its state.

Subclass it and assign `Variable`s, other Modules, lists and dicts of them, and static
values in `__init__`; call it like a function. It is a graph node (through the
`bryo_graph_node_types` hook), so `split`, `merge`, `state` and `update` work on it,
shared submodules and cycles included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from bryo_graph import Object, Variable, iter_graph
from bryo_pytree import Path, is_shaped

from ._intercept import wrap_call


class Module(Object):
    """Base class of NNX-style modules.

    >>> class Foo(Module):
    ...     def __init__(self):
    ...         self.a = Param(0)
    """

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is not None:  # seen by make_mox while it traces (bryo-mox-ir)
            cls.__call__ = wrap_call(call)

    def sow(
        self,
        variable_type: type[Variable],
        name: str,
        value: object,
        reduce_fn: Callable[[object, object], object] = lambda sown, new: (*sown, new),
        init_fn: Callable[[], object] = tuple,
    ) -> bool:
        """Keep `value` on this module as the `variable_type` Variable `name`.

        The first value is `reduce_fn(init_fn(), value)`, later ones are folded in with
        `reduce_fn`: by default the Variable holds the tuple of every value sown, one per
        call (`MultiHeadAttention(...)(x, sow_weights=True)` sows its attention weights as
        `Intermediate` 'attention_weights'). Take them out with `nnx.pop(model,
        Intermediate)`.

        Raises:
            ValueError: `name` is an attribute that is not a `variable_type` Variable.
        """
        if not (isinstance(variable_type, type) and issubclass(variable_type, Variable)):
            raise TypeError(
                f"`sow` takes a Variable type (e.g. `nnx.Intermediate`) first; got "
                f"{variable_type!r}."
            )
        existing = vars(self).get(name)
        if existing is None:
            setattr(self, name, variable_type(reduce_fn(init_fn(), value)))
        elif type(existing) is not variable_type:
            raise ValueError(
                f"{type(self).__name__}.sow: the attribute {name!r} is a "
                f"{type(existing).__name__}; `sow` was given {variable_type.__name__}. Sow under "
                "another name."
            )
        else:
            existing[...] = reduce_fn(existing.value, value)
        return True

    def iter_modules(self) -> Iterator[tuple[Path, Module]]:
        """Every Module in this one's graph (itself included) with its path, children first."""
        for path, value in iter_graph(self):
            if isinstance(value, Module):
                yield path, value

    def set_attributes(self, *, raise_if_not_found: bool = True, **attributes: object) -> None:
        """Set `attributes` on every submodule that has them (e.g. `deterministic=True`).

        Raises:
            ValueError: with `raise_if_not_found`, when some attribute exists on no module.
        """
        found: set[str] = set()
        for _, module in self.iter_modules():
            for name, value in attributes.items():
                if name in vars(module):
                    setattr(module, name, value)
                    found.add(name)
        missing = sorted(set(attributes) - found)
        if missing and raise_if_not_found:
            raise ValueError(
                f"no module in {type(self).__name__} has the attribute(s) {missing}; pass "
                "`raise_if_not_found=False` to ignore them."
            )

    def train(self, **attributes: object) -> None:
        """Training mode: `deterministic=False`, `use_running_average=False` where present."""
        self.set_attributes(
            deterministic=False, use_running_average=False, **attributes, raise_if_not_found=False
        )

    def eval(self, **attributes: object) -> None:
        """Evaluation mode: `deterministic=True`, `use_running_average=True` where present."""
        self.set_attributes(
            deterministic=True, use_running_average=True, **attributes, raise_if_not_found=False
        )

    def __repr__(self) -> str:
        from bryo_pytree import describe_leaf

        fields = []
        for name, value in sorted(vars(self).items()):
            if isinstance(value, Module):
                text = f"{type(value).__name__}(...)"
            elif isinstance(value, Variable):
                text = repr(value)
            elif is_shaped(value):
                text = describe_leaf(value)
            else:
                text = repr(value)
            fields.append(f"{name}={text}")
        return f"{type(self).__name__}({', '.join(fields)})"
