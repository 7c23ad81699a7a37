"""The command line's mesh spec (`bryo demo --mesh data=4,model=2`)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo import parse_mesh_spec
from bryo_graph import ShardingError


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("data", r"part 'data' of the mesh spec 'data' is not `name=size`"),
        ("data=4,1x=2", r"part '1x=2'"),
        ("data=two", r"part 'data=two' .* positive integer"),
        ("data=0", r"part 'data=0'"),
        ("data=1,data=1", "names the axis 'data' twice"),
        ("a=-1,b=-1", "more than one size -1"),
        ("data=4,model=2", "needs 8 devices but there are 1"),
        ("", "`spec` must be a string"),
    ],
)
def test_parse_mesh_spec_errors(spec, message):
    with pytest.raises(ShardingError, match=message):
        parse_mesh_spec(spec)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=4, unique=True
    ),
    st.data(),
)
def test_parse_mesh_spec_round_trip(names, data):
    inferred = data.draw(st.sampled_from([None, *names]))
    spec = ",".join(f"{n}={-1 if n == inferred else 1}" for n in names)
    mesh = parse_mesh_spec(spec)
    assert tuple(mesh.axis_names) == tuple(names)
    assert dict(mesh.shape) == {n: 1 for n in names}
