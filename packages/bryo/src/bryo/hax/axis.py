"""`hax.axis`: the axis helpers Haliax code imports from `haliax.axis`."""

from bryo_named import Axis as Axis
from bryo_named import AxisSelection as AxisSelection
from bryo_named import AxisSelector as AxisSelector
from bryo_named import AxisSpec as AxisSpec
from bryo_named import axis_name as axis_name
from bryo_named import axis_spec_to_shape_dict as axis_spec_to_shape_dict
from bryo_named import axis_spec_to_tuple as axis_spec_to_tuple
from bryo_named import dblock as dblock
from bryo_named import ds as ds
from bryo_named import dslice as dslice
from bryo_named import make_axes as make_axes
