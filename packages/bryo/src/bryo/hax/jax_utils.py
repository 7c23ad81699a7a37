"""`hax.jax_utils`: JAX helpers Haliax code imports from `haliax.jax_utils`.

`tree_checkpoint_name` names every array of a pytree for checkpoint policies
(`ScanCheckpointPolicy(save_block_internals=[...])`).
"""

from bryo_scan import tree_checkpoint_name as tree_checkpoint_name
