"""The error for a Haliax name that `bryo.hax` lacks.

A user who changed `import haliax as hax` to `from bryo import hax` and then reaches
for one of Haliax's layers (`hax.nn.Linear`) or another name bryo did not reimplement
(`hax.einsum`) gets an `AttributeError` (so `hasattr` still answers False) that says
where the name lives instead: in Haliax itself, whose models bryo takes as they are.
"""

from __future__ import annotations


def missing_name(module: str, name: str) -> AttributeError:
    """The `AttributeError` for `module.name`, pointing a public name to Haliax's own."""
    plain = f"module {module!r} has no attribute {name!r}"
    if name.startswith("_"):
        return AttributeError(plain)
    haliax_path = "haliax" + module.removeprefix("bryo.hax") + f".{name}"
    return AttributeError(
        f"{plain}. `bryo.hax` reimplements Haliax's named arrays, its scan API (`scan`, "
        "`fold`, `map`, `Stacked`, `BlockSeq`) and its state dicts, not Haliax's layers or "
        "the rest of it: if "
        f"`{haliax_path}` is what you want, use Haliax itself (`import haliax`). bryo's "
        "graph functions, filters, transforms, scan and MoX take real Haliax models and "
        "arrays (bryo-backend-haliax); see 'What bryo.hax covers of Haliax' in the "
        "bryo.hax guide."
    )
