"""Entry-point groups: `bryo`, `bryo.<family>`, `bryo.<family>.<key>`; blocked names."""

import pytest

from bryo_plugins._entry_points import is_blocked, parse_group


@pytest.mark.parametrize(
    ("group", "parsed"),
    [
        ("bryo", (None, None)),
        ("bryo.graph", ("graph", None)),
        ("bryo.graph.equinox", ("graph", "equinox")),
        ("bryo.serializers.xml", ("serializers", "xml")),
        ("bryo.", None),
        ("bryox", None),
        ("pytest11", None),
    ],
)
def test_groups_name_a_family_and_a_key(group, parsed):
    assert parse_group(group) == parsed


def test_plugins_are_blocked_by_name_or_distribution_compared_as_pypi_does():
    blocked = frozenset({"hello", "Acme_Tools"})
    assert is_blocked("hello", None, blocked)
    assert is_blocked("other", "acme-tools", blocked)
    assert not is_blocked("other", "acme", blocked)
