"""`hax.state_dict`: torch-style state dicts and safetensors files, as `haliax.state_dict`.

`to_state_dict(model)` names every array by its dotted path (`"blocks.0.weight"`; a
`Stacked` writes one entry per layer, as a `torch.nn.Sequential`), `from_state_dict(model,
state_dict)` reads one back into a model of the same structure, and `save_state_dict` /
`load_state_dict` write and read safetensors files (Hugging Face checkpoints). Unlike
Haliax, a missing key, a mis-shaped array or two leaves writing one key raise a
`StateDictError` naming the key, and a damaged file a `StateDictFileError`.
"""

from bryo_scan import StateDict as StateDict
from bryo_scan import StateDictError as StateDictError
from bryo_scan import from_state_dict as from_state_dict
from bryo_scan import to_state_dict as to_state_dict
from bryo_scan import with_prefix as with_prefix

from .._state_dict import ModuleWithStateDictSerialization as ModuleWithStateDictSerialization
from .._state_dict import StateDictFileError as StateDictFileError
from .._state_dict import flatten_modules_for_export as flatten_modules_for_export
from .._state_dict import from_torch_compatible_state_dict as from_torch_compatible_state_dict
from .._state_dict import load_state_dict as load_state_dict
from .._state_dict import save_state_dict as save_state_dict
from .._state_dict import to_numpy_state_dict as to_numpy_state_dict
from .._state_dict import to_torch_compatible_state_dict as to_torch_compatible_state_dict
from .._state_dict import unflatten_modules_from_export as unflatten_modules_from_export
from ._missing import missing_name as _missing_name


def __getattr__(name: str) -> object:
    raise _missing_name(__name__, name)
