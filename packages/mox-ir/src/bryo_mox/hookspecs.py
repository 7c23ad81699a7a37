"""MoX's extension points: module-call interception (backends) and serializers.

Backends implement `bryo_mox_interceptor` so that `make_mox` sees their module calls;
serializer plugins implement `bryo_mox_serializers` to add file formats. mox-ir itself
knows no backend and no format.

Two hook families, both loaded lazily. `mox`: a backend's entry point in group
`bryo.mox.<module>` (the top-level module of its module classes: `bryo.mox.equinox`) is
imported when `make_mox` traces while that module is imported. `serializers`: a
serializer's entry point in group `bryo.serializers.<format>` is imported on the first
`dump`/`load` of that format (or of a file whose extension names it); all serializers are
imported only when the format or extension is still unknown.
"""

from __future__ import annotations

from collections.abc import Sequence

from bryo_plugins import hookspec

from ._hooks import Interceptor, Serializer


@hookspec
def bryo_mox_interceptor() -> Interceptor | None:
    """Return an interceptor that routes this backend's module calls to MoX, or `None`.

    An interceptor is a callable `interceptor(handler)` returning a context manager.
    `make_mox` enters the context managers of every backend while it traces; on exit the
    backend must stop routing. While active, each call `module(*args, **kwargs)` of one of
    the backend's modules (at any depth, nested calls included) must instead return

        handler(info, state, pure, write_back, args, kwargs)

    where the backend supplies:

    - `info`: `bryo_mox.ModuleInfo(type="pkg.Class", name="path/in/model",
      attrs={static attributes})`, e.g. `attrs={"in_features": 3, "features": 10}`:
      ints, floats, bools, strings, `None` or tuples of these.
    - `state`: the module's array state as a pytree (its parameters and other
      Variables, those of submodules included). Non-array leaves are kept as static.
    - `pure`: a PURE function `pure(state, *args, **kwargs) -> (new_state, out)` that
      runs the module's forward pass with `state` in place of the module's own and
      returns the state after the call (same structure as `state`) and the call's result.
      It must leave the module exactly as it found it: a mutation made during the call (an
      rng count, batch statistics) is returned in `new_state`, never left behind, because
      `pure` runs inside a traced region whose tracers must not escape.
    - `write_back(new_state)`: store `new_state` into the module, as the call itself
      would have done. It is called with traced values during tracing; `make_mox` calls it
      again with the original state when tracing ends, so the user's module is unchanged.

    The handler runs `pure` inside a marked region (one `module_call` node, its inputs
    the state leaves followed by the call's array arguments), calls `write_back`, and
    returns `out`. Submodule calls inside `pure` go through the handler again and become
    nested `module_call` nodes. Interceptors must be re-entrant and thread-confined (use a
    context variable or thread-local for the active handler).
    """


@hookspec
def bryo_mox_serializers() -> Sequence[Serializer]:
    """Return the serializers (file formats) this plugin provides.

    Each `bryo_mox.Serializer(format, extensions, dumps, loads)` gives a format name
    (`"xml"`), the file extensions it claims (`(".xml", ".mox.xml")`), and two functions
    over `bryo_mox.document` trees: `dumps(doc: DocNode) -> str | bytes` and
    `loads(data: str | bytes) -> DocNode`. mox-ir converts between MoX and documents and
    rebuilds the computation; the serializer only writes and reads its syntax. `loads` must
    be safe on untrusted input (no external entities, no network, bounded size and depth)
    and raise `bryo_mox.MoxSerializationError` with the line or position of the problem.
    """
    ...
