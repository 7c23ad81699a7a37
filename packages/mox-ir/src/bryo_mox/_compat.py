"""JAX APIs whose availability differs across the supported versions (0.7 to the newest).

`check_jaxpr`: `jax.extend.core.check_jaxpr` type-checks a jaxpr (every equation's
inputs and outputs, sub-jaxprs included). It is exported by `jax.extend.core` in the JAX
versions bryo is tested with (0.10); where a JAX lacks it, `loads` skips this check of
rebuilt higher-order equations (the loader's own checks of every declared type still run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jax.extend import core as _jex

check_jaxpr: Callable[[Any], None] | None = getattr(_jex, "check_jaxpr", None)
JaxprTypeError: type[Exception] = getattr(_jex, "JaxprTypeError", TypeError)
