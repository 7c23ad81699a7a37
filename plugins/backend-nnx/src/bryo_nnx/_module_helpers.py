"""Functions over a model's modules (Flax NNX 0.12): walking them, configured copies of a
model, and capturing the values its modules sow.

- `iter_modules` / `iter_module_children`: the modules of a graph, with paths or keys;
- `with_attributes(model, only=..., **attrs)`: a copy (sharing the Variables) whose
  selected modules have the attributes set; `view(model, **kwargs)` does the same through
  the modules' `set_view` methods (Dropout's `deterministic`, BatchNorm's
  `use_running_average`, ...), and `view_info` lists what they take;
- `capture(fn, Intermediate, ...)`: run `fn` and return what its modules `sow`, one State
  per Variable type (`_capture`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeGuard, TypeVar

from bryo_filters import Filter, to_predicate
from bryo_graph import State, Variable, iter_children, iter_graph, recursive_map
from bryo_pytree import Key, Path

from ._capture import Captures, recording_method_outputs, variable_slots
from ._module import Module

A = TypeVar("A")


def iter_modules(module: object, /, *, graph: bool | None = None) -> Iterator[tuple[Path, Module]]:
    """Every Module of `module`'s graph (itself included) with its path, children first.

    Args:
        module: a module (or any graph node holding modules).
        graph: False walks the graph in tree mode.

    Yields:
        `(path, module)` pairs, each module once.
    """
    for path, value in iter_graph(module, graph=graph):
        if isinstance(value, Module):
            yield path, value


def iter_module_children(
    node: object, /, *, graph: bool | None = None
) -> Iterator[tuple[Key, Module]]:
    """`(key, module)` for each direct child of `node` that is a Module."""
    for key, child in iter_children(node, graph=graph):
        if isinstance(child, Module):
            yield key, child


def missing_attributes_error(missing: set[str]) -> ValueError:
    """The error of `set_attributes`/`with_attributes` for attributes no module has."""
    return ValueError(
        f"Could not find at least one instance of the following attributes: {sorted(missing)} "
        "(no selected module has them); check the names, or pass `raise_if_not_found=False` "
        "to ignore them."
    )


def with_attributes(
    node: A,
    /,
    *,
    only: Filter = ...,
    raise_if_not_found: bool = True,
    graph: bool | None = None,
    **attributes: object,
) -> A:
    """A copy of `node` whose selected modules have `attributes` set (where they have
    them); the copy shares `node`'s Variables, and `node` is left unchanged.

    Args:
        node: the model.
        only: a filter of `(path, module)` selecting the modules (default: all).
        raise_if_not_found: raise when some attribute exists on no selected module.
        graph: False copies in tree mode.
        **attributes: the attributes to set.

    Returns:
        The copy.

    Example:
        >>> eval_model = with_attributes(model, deterministic=True)  # doctest: +SKIP
    """
    predicate = to_predicate(only)
    unused = set(attributes)

    def set_attributes(path: Path, value: object) -> object:
        if isinstance(value, Module) and predicate(path, value):
            for name, attribute in attributes.items():
                if hasattr(value, name):
                    setattr(value, name, attribute)
                    unused.discard(name)
        return value

    out = recursive_map(set_attributes, node, graph=graph)
    if unused and raise_if_not_found:
        raise missing_attributes_error(unused)
    return out


class _Viewable(Protocol):
    """A module with a `set_view` method, which `view` calls with the keywords it takes."""

    def set_view(self, **kwargs: Any) -> None: ...


def _is_viewable(value: object) -> TypeGuard[_Viewable]:
    return hasattr(value, "set_view")


def _view_keywords(module: _Viewable) -> tuple[set[str], bool]:
    """The keyword names `module.set_view` takes, and whether it takes `**kwargs`."""
    params = inspect.signature(module.set_view).parameters.values()
    named = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return named, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def view(
    node: A,
    /,
    *,
    only: Filter = ...,
    raise_if_not_found: bool = True,
    graph: bool | None = None,
    **kwargs: object,
) -> A:
    """A copy of `node` (sharing its Variables) configured by the `set_view` methods of
    its selected modules: each gets the keywords its `set_view` takes.

    Args:
        node: the model.
        only: a filter of `(path, module)` selecting the modules (default: all).
        raise_if_not_found: raise when some keyword is taken by no selected module.
        graph: False copies in tree mode.
        **kwargs: the view's settings, e.g. `deterministic=True`.

    Returns:
        The configured copy; `node` is unchanged.

    Example:
        >>> eval_model = view(model, deterministic=True, use_running_average=True)  # doctest: +SKIP
    """
    predicate = to_predicate(only)
    unused = set(kwargs)

    def set_view(path: Path, value: object) -> object:
        if _is_viewable(value) and predicate(path, value):
            named, takes_any = _view_keywords(value)
            taken = kwargs if takes_any else {k: v for k, v in kwargs.items() if k in named}
            value.set_view(**taken)
            unused.difference_update(kwargs if takes_any else named)
        return value

    out = recursive_map(set_view, node, graph=graph)
    if unused and raise_if_not_found:
        raise ValueError(
            f"Unused keys found in nnx.view: {sorted(unused)} (no selected module's "
            "`set_view` takes them; `view_info(model)` lists what they take)."
        )
    return out


def _describe_parameter(p: inspect.Parameter) -> str:
    """`name: annotation = default`, as a signature shows it (string annotations unquoted)."""
    text = p.name
    if p.annotation is not inspect.Parameter.empty:
        annotation = p.annotation
        if not isinstance(annotation, str):
            annotation = inspect.formatannotation(annotation)
        text += f": {annotation}"
    if p.default is not inspect.Parameter.empty:
        text += f" = {p.default!r}"
    return text


def _argument_docs(doc: str) -> dict[str, list[str]]:
    """The lines describing each argument in the `Args:` section of a Google-style docstring."""
    docs: dict[str, list[str]] = {}
    in_args, current, indent = False, None, None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped == "Args:":
            in_args = True
            continue
        if not in_args or not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break
        name, colon, text = stripped.partition(":")
        if depth == indent and colon and name.isidentifier():
            current = name
            docs[current] = [text.strip()] if text.strip() else []
        elif current is not None:
            docs[current].append(stripped)
    return docs


def view_info(node: object, /, *, only: Filter = ..., graph: bool | None = None) -> str:
    """What `view` can set on `node`: per module class with a `set_view`, its keywords."""
    predicate = to_predicate(only)
    classes = {
        type(value)
        for path, value in iter_graph(node, graph=graph)
        if hasattr(value, "set_view") and predicate(path, value)
    }
    lines = []
    for cls in sorted(classes, key=lambda c: c.__qualname__):
        lines.append(f"{cls.__qualname__}:")
        docs = _argument_docs(inspect.getdoc(cls.set_view) or "")
        params = inspect.signature(cls.set_view).parameters.values()
        for p in params:
            if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            lines.append(f"  {_describe_parameter(p)}")
            lines += [f"    {line}" for line in docs.get(p.name, [])]
    return "\n".join(lines)


def _is_variable_type(value: object) -> TypeGuard[type[Variable]]:
    return isinstance(value, type) and issubclass(value, Variable)


def capture(
    fn: Callable[..., Any] | type[Variable],
    *var_types: type[Variable],
    init: State | None = None,
    method_outputs: type[Variable] | None = None,
) -> Any:
    """Run `fn` and return what its model's modules `sow`, without changing the model.

    The model is `fn`'s first argument, or `fn` itself when it is a Module or a bound
    method of one. `capture(Intermediate)` (types first) returns a decorator. Values
    sown inside lifted transforms (`scan`, `vmap`) are captured too.

    Args:
        fn: the function, module or bound method.
        *var_types: the Variable types to capture (`Intermediate`, ...).
        init: a State `capture` returned, to start from its values.
        method_outputs: a Variable type (captured, i.e. among `var_types`) under which
            the result of every public method and `__call__` of the model's modules is
            sown, named after the method (outside lifted transforms).

    Returns:
        A function returning `(result, state)` for one type, `(result, *states)` for
        several (one State per type, nested by module path), or only the result for none.

    Example:
        >>> y, intermediates = capture(model, Intermediate)(x)  # doctest: +SKIP
    """
    if isinstance(fn, type) and issubclass(fn, Variable):
        types = (fn, *var_types)
        return lambda actual: capture(actual, *types, init=init, method_outputs=method_outputs)
    for var_type in var_types:
        if not _is_variable_type(var_type):
            raise TypeError(f"`capture` takes Variable types to capture; got {var_type!r}.")
    if method_outputs is not None and not _is_variable_type(method_outputs):
        raise TypeError(
            "`capture(method_outputs=...)` takes the Variable type to sow method results "
            f"as (e.g. `nnx.Intermediate`); got {method_outputs!r}."
        )
    bound = getattr(fn, "__self__", None) if inspect.ismethod(fn) else None
    owner = fn if isinstance(fn, Module) else bound if isinstance(bound, Module) else None

    @functools.wraps(fn)
    def captured(*args: Any, **kwargs: Any) -> Any:
        model = owner if owner is not None else (args[0] if args else None)
        if model is None:
            raise TypeError(
                "`capture`: the function takes the model first; call it with the model as "
                "its first argument, or capture a module or a bound method."
            )
        modules = list(iter_modules(model))
        before = variable_slots(modules)
        classes = [type(module) for _, module in modules] if method_outputs else []
        with (
            Captures(modules, var_types, init, method_outputs) as session,
            recording_method_outputs(classes, Module),
        ):
            try:
                session.install(modules)
                result = fn(*args, **kwargs)
            finally:  # the model is left unchanged even when `fn` raises
                session.adopt(modules, before)
        if not var_types:
            return result
        return (result, *session.states())

    return captured
