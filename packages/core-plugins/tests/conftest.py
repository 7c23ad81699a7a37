"""Test hooks of core-plugins' own tests: a small extension point with table, list and
firstresult hooks, declared once, and plugins implementing it.

The specs stay declared for the whole session (hookspecs cannot be removed); their names
start with `bryo_test_`, and no bryo package implements them.
"""

from __future__ import annotations

from bryo_plugins import add_hookspecs, hookspec


class TestSpecs:
    @hookspec
    def bryo_test_table(self):
        """Types this plugin handles, each with a label."""

    @hookspec
    def bryo_test_items(self, value):
        """Items this plugin makes of `value`."""

    @hookspec(firstresult=True)
    def bryo_test_first(self, value):
        """An answer for `value`, or None to pass."""


add_hookspecs(TestSpecs)
