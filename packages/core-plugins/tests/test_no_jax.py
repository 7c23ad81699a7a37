"""bryo_plugins is the lowest layer: importing it (and its pytest fixtures) never imports JAX."""

import subprocess
import sys

CHECK = """
import sys
import bryo_plugins, bryo_plugins.testing
bryo_plugins.new_plugin_manager()
heavy = sorted(m for m in ("jax", "numpy", "bryo_pytree", "bryo_graph") if m in sys.modules)
print(",".join(heavy))
"""


def test_importing_bryo_plugins_imports_no_jax():
    result = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == ""
