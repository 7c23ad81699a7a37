"""`functional(cls)`: an NNX-style module class used the Linen way, `init` then `apply`.

`functional(Linear)(2, 3)` holds the class and its arguments; `init(rngs=...)` builds the
module and returns its State (keeping the GraphDef), `apply(*states)` gives the GraphDef's
`apply` caller: `out, (graphdef, state) = f.apply(state)(x)`, as with Flax NNX's bridge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from bryo_graph import GraphDef, State, split
from bryo_rngs import Rngs

from .._module import Module

M = TypeVar("M", bound=Module)


@dataclasses.dataclass
class Functional(Generic[M]):
    """An NNX-style module class and its arguments, with the GraphDef `init` made.

    Attributes:
        module_type: the module class.
        graphdef: the GraphDef of the module `init` built (None before).
        args: the class's positional arguments.
        kwargs: its keyword arguments.
    """

    module_type: type[M]
    graphdef: GraphDef | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def init(self, *, rngs: Rngs | None = None) -> State:
        """Build the module (with `rngs` when given) and return its State."""
        extra = {} if rngs is None else {"rngs": rngs}
        graphdef, state = split(self.module_type(*self.args, **self.kwargs, **extra))
        self.graphdef = graphdef
        return state

    def apply(self, *states: Any) -> Any:
        """`graphdef.apply(*states)`: call it like the module; it returns the output and
        the new `(graphdef, state)`.

        Raises:
            ValueError: `init` has not run yet.
        """
        if self.graphdef is None:
            raise ValueError(
                f"`Functional({self.module_type.__name__}).apply` needs the GraphDef `init` "
                "makes: call `state = f.init(rngs=nnx.Rngs(0))` first."
            )
        return self.graphdef.apply(*states)


def functional(cls: type[M]) -> Callable[..., Functional[M]]:
    """`functional(cls)(*args, **kwargs)`: a `Functional` of the class and its arguments.

    Args:
        cls: the NNX-style module class.

    Returns:
        A constructor taking the class's arguments (without `rngs`: `init` takes them).
    """
    if not (isinstance(cls, type) and issubclass(cls, Module)):
        raise TypeError(
            f"`functional` takes an NNX-style module class (e.g. `nnx.Linear`) as `cls`; got "
            f"{cls!r}."
        )

    def make(*args: Any, **kwargs: Any) -> Functional[M]:
        return Functional(cls, None, args, kwargs)

    return make
