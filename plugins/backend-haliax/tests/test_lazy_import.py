"""bryo imports Haliax only for a user who did: a bryo.hax scan over string axes leaves it
unimported (it costs seconds at startup), and a Haliax array met later is still scanned as
one."""

import subprocess
import sys

import pytest

CHECK = """
import sys
import jax.numpy as jnp
from bryo import hax

x = hax.named(jnp.ones((3, 2)), ("Time", "Embed"))
init = hax.zeros(hax.Axis("Embed", 2))
hax.scan(lambda c, x: (c + x, c), "Time")(init, x)
hax.fold(lambda c, x: c + x, "Time")(init, x)
hax.map(lambda x: x * 2.0, "Time")(x)
print("imported:", sorted(m for m in ("haliax", "flax") if m in sys.modules))

import haliax  # the user imports Haliax afterwards: its arrays are scanned by name

xs = haliax.ones((haliax.Axis("Time", 3), haliax.Axis("Embed", 2)))
carry, ys = hax.scan(lambda c, x: (c + x, x), "Time")(haliax.zeros(haliax.Axis("Embed", 2)), xs)
print("after:", type(carry).__module__.partition(".")[0], [a.name for a in ys.axes])
"""


@pytest.mark.slow
def test_a_string_axis_scan_does_not_import_haliax():
    result = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["imported: []", "after: haliax ['Time', 'Embed']"]
