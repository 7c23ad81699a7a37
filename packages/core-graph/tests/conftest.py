"""Test helpers shared by core-graph's tests: a backend with a node kind of its own.

`Box` is an immutable node with one child, registered through the
`bryo_graph_node_types` hook as a backend registers its modules (an Equinox module, say).
Tests ask for the `box` fixture: it registers the backend on the test's fresh plugin
manager and gives the class.
"""

from __future__ import annotations

import dataclasses

import pytest

from bryo_graph import NodeType
from bryo_plugins import hookimpl


@dataclasses.dataclass(frozen=True)
class Box:
    """An immutable node of a backend's own kind, with one child."""

    content: object


class BoxBackend:
    @hookimpl
    def bryo_graph_node_types(self):
        return (
            NodeType(
                Box,
                flatten=lambda node: ((("content", node.content),), None),
                unflatten=lambda cls, aux, children: cls(children[0][1]),
            ),
        )


@pytest.fixture
def box(bryo_plugin_manager) -> type[Box]:
    """`Box`, with its backend registered on the test's plugin manager."""
    bryo_plugin_manager.register(BoxBackend())
    return Box
