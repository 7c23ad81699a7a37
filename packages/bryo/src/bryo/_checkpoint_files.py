"""The files of a checkpoint folder: written beside, swapped in by rename, checked before use.

A save never touches the checkpoint it replaces until the new one is complete. orbax
writes the new checkpoint into a sibling folder `NAME.bryo-new-TOKEN`; `seal` then hashes
and fsyncs every file and writes the manifest (each file's size and SHA-256) last, so a
folder with a manifest is complete. `swap_in` renames the old folder to
`NAME.bryo-old-TOKEN`, the new one to `NAME`, and removes the old one. A directory cannot
be renamed over a non-empty one, so a `kill -9` between the two renames leaves no `NAME`:
`resolve` (used by every read) then finds the complete new folder, and `recover` (run by
the next save) renames it into place and removes every leftover of unfinished saves.

Reading trusts nothing in the folder: `walk` refuses links and special files, `read_json`
bounds a JSON file's size and nesting before parsing it, `read_manifest` checks the
manifest against its own digest and the rules for file names, and `check_files` compares
every file with the manifest (missing, added, resized, changed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, TypeVar

try:
    import fcntl
except ImportError:  # (Windows: no advisory locks; processes must not share a folder)
    fcntl = None

#: The file listing every other file of a checkpoint with its size and SHA-256.
MANIFEST = "bryo-manifest.json"
MANIFEST_FORMAT = "bryo checkpoint manifest"
MANIFEST_VERSION = 1
#: The largest JSON file (manifest, index) a checkpoint may hold: about 200k Variables.
MAX_JSON_BYTES = 64 * 2**20
#: How deep a checkpoint's JSON may nest (bryo writes 4 levels plus the metadata's own).
MAX_JSON_DEPTH = 32
#: Marks of an unfinished save: new (being written) and old (being replaced) folders.
NEW, OLD = "new", "old"
#: The mark of a checkpoint's lock file (`lock_path`).
LOCK = "lock"
_ORBAX_TEMPORARY = ".orbax-checkpoint-tmp"
_CHUNK = 2**20
_HEX = re.compile(r"[0-9a-f]{64}")

_T = TypeVar("_T")
_R = TypeVar("_R")


class CheckpointError(ValueError):
    """A checkpoint that is damaged, crafted, or does not fit what it is restored into, or a
    state that cannot be saved."""


class FileRecord(NamedTuple):
    """What the manifest records about one file: its size and SHA-256."""

    size: int
    sha256: str


class Leftover(NamedTuple):
    """A sibling folder left by an unfinished save of a checkpoint."""

    path: Path
    kind: str  # NEW, OLD, or "orbax" (orbax's own temporary folder)
    complete: bool  # a NEW folder whose manifest was written: a whole checkpoint


class Damage(NamedTuple):
    """How one file of a checkpoint differs from its manifest."""

    name: str
    problem: str
    changed: bool  # same size, other bytes (a flipped or garbled byte)


# Taking turns between processes ----------------------------------------------------------


def lock_path(directory: Path) -> Path:
    """The lock file of the checkpoint `directory`: a hidden file beside it, `.NAME.bryo-lock`
    (never taken for a leftover of a save, and removed by the last process using it)."""
    return directory.with_name(f".{directory.name}.bryo-{LOCK}")


@contextlib.contextmanager
def checkpoint_lock(directory: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold an advisory lock (`flock`) on the checkpoint `directory` meanwhile.

    A save holds it exclusively, from finishing what a killed save left to swapping its
    folder in: another process saving to the same path would otherwise take the folder
    it is writing for a leftover and remove it, or swap its own in between its renames.
    Reads hold it shared, so they never see a folder being swapped. The lock is a file
    beside the checkpoint (`lock_path`), so saves and restores of other checkpoints in
    the same folder never wait for each other. The kernel releases it when the process
    dies, so a killed save never blocks the next (its lock file stays until the next
    lock of that checkpoint removes it). Where the file cannot be created or locked (a
    read-only folder without one, a file system without locks), nothing is held."""
    descriptor = _lock(lock_path(directory), exclusive) if fcntl is not None else None
    try:
        yield
    finally:
        if descriptor is not None:
            _unlock(lock_path(directory), descriptor)


def _lock(path: Path, exclusive: bool) -> int | None:
    """An open descriptor of the lock file at `path`, locked; None where none can be."""
    assert fcntl is not None
    while True:
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # (a read-only folder: lock the file if one is there)
            try:
                descriptor = os.open(path, os.O_RDONLY)
            except OSError:
                return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            same = os.path.samestat(os.fstat(descriptor), os.stat(path))
        except FileNotFoundError:
            same = False
        except OSError:  # a file system without locks
            os.close(descriptor)
            return None
        if same:
            return descriptor
        # The last holder removed the file while this process waited: lock the new one.
        os.close(descriptor)


def _unlock(path: Path, descriptor: int) -> None:
    """Release the lock, removing its file first when no other process holds it."""
    assert fcntl is not None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (the only holder?)
        os.unlink(path)
    except OSError:  # others hold it (the last of them removes it), or a read-only folder
        pass
    finally:
        os.close(descriptor)  # (releases the lock)


# Writing --------------------------------------------------------------------------------


def staging_folder(directory: Path) -> Path:
    """A fresh sibling folder name for a new checkpoint of `directory`."""
    return directory.with_name(f"{directory.name}.bryo-{NEW}-{secrets.token_hex(8)}")


def seal(folder: Path) -> None:
    """Hash and fsync every file of a written checkpoint, then write its manifest last.

    The manifest goes to a temporary name and is renamed into place, so a folder holding
    a manifest is a complete checkpoint (an earlier manifest is replaced)."""
    files = {name: path for name, path in walk(folder).items() if name != MANIFEST}
    records = dict(zip(files, parallel(_hash_and_sync, files.values()), strict=True))
    document = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "files": {name: record._asdict() for name, record in sorted(records.items())},
    }
    document["sha256"] = _files_digest(document["files"])
    partial = folder / f"{MANIFEST}.partial"
    with open(partial, "w", encoding="utf-8") as file:
        json.dump(document, file, indent=0)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, folder / MANIFEST)
    for directory in {folder, *(path.parent for path in files.values())}:
        _sync_directory(directory)


def swap_in(staging: Path, directory: Path) -> None:
    """Put the complete checkpoint `staging` at `directory`, replacing what is there.

    Two renames: the old checkpoint aside, the new one into place; `resolve` and `recover`
    handle a kill between them. The old one is removed once the new one is in place."""
    token = staging.name.rsplit("-", 1)[-1]
    retired = directory.with_name(f"{directory.name}.bryo-{OLD}-{token}")
    replacing = directory.is_symlink() or directory.exists()
    if replacing:
        os.rename(directory, retired)
        _sync_directory(directory.parent)
    os.rename(staging, directory)
    _sync_directory(directory.parent)
    if replacing:
        remove(retired)


def recover(directory: Path) -> None:
    """Finish what an interrupted save left: a complete new checkpoint where `directory`
    is missing goes into place; every other leftover folder is removed."""
    leftovers = find_leftovers(directory)
    found = resolve(directory, leftovers)
    if found != directory:
        os.rename(found, directory)
        _sync_directory(directory.parent)
    for leftover in leftovers:
        if leftover.path != found:
            remove(leftover.path)


def remove(path: Path) -> None:
    """Remove a file, a link (never what it points to) or a folder, if it exists."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path)


def is_replaceable(directory: Path, markers: Iterable[str]) -> bool:
    """Whether `force=True` may replace what is at `directory`: a link, an empty folder,
    or a folder holding one of `markers` (a checkpoint's files), never other data."""
    if directory.is_symlink():
        return True
    if not directory.is_dir():
        return False
    names = {entry.name for entry in os.scandir(directory)}
    return not names or bool(names & set(markers))


# Finding --------------------------------------------------------------------------------


def find_leftovers(directory: Path) -> list[Leftover]:
    """The sibling folders unfinished saves of `directory` left, newest first."""
    pattern = re.compile(
        rf"{re.escape(directory.name)}(?:\.bryo-({NEW}|{OLD})-[0-9a-f]{{16}})?"
        rf"({re.escape(_ORBAX_TEMPORARY)}.*)?"
    )
    found = []
    try:
        entries = list(os.scandir(directory.parent))
    except (FileNotFoundError, NotADirectoryError):  # (no such folder: nothing left)
        return []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or entry.name == directory.name:
            continue
        kind, orbax = match.groups()
        path = Path(entry.path)
        complete = kind == NEW and not orbax and _is_sealed(path)
        found.append(Leftover(path, "orbax" if orbax else kind, complete))
    return sorted(found, key=lambda leftover: _age(leftover.path))


def resolve(directory: Path, leftovers: list[Leftover] | None = None) -> Path:
    """Where the checkpoint of `directory` is: `directory` itself, or where a save was
    killed between its two renames, the complete new folder it left (the newest one)."""
    if directory.is_symlink() or directory.exists():
        return directory
    for leftover in find_leftovers(directory) if leftovers is None else leftovers:
        if leftover.complete:
            return leftover.path
    return directory


def _is_sealed(folder: Path) -> bool:
    return (folder / MANIFEST).is_file() and not folder.is_symlink()


def _age(path: Path) -> int:
    try:
        return -path.lstat().st_mtime_ns
    except OSError:
        return 0


# Reading --------------------------------------------------------------------------------


def walk(folder: Path) -> dict[str, Path]:
    """Every file of a checkpoint folder by its relative name (`/`-separated), sorted.

    A link or special file anywhere inside is refused: bryo never writes one, and a link
    could make a restore read another checkpoint or any file."""
    files: dict[str, Path] = {}
    pending = [folder]
    while pending:
        current = pending.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                path = Path(entry.path)
                if entry.is_symlink():
                    raise CheckpointError(
                        f"{path}: a link inside a checkpoint (to {os.readlink(path)!r}); bryo "
                        "never writes links and refuses them, since one can point out of the "
                        "folder. Replace it with the file it points to, or save again."
                    )
                if entry.is_dir(follow_symlinks=False):
                    pending.append(path)
                elif entry.is_file(follow_symlinks=False):
                    files[path.relative_to(folder).as_posix()] = path
                else:
                    raise CheckpointError(
                        f"{path}: not a regular file or folder (a device, socket or pipe); a "
                        "checkpoint holds files only."
                    )
    return dict(sorted(files.items()))


def read_json(file: Path, what: str) -> object:
    """A JSON file of at most `MAX_JSON_BYTES`, nested at most `MAX_JSON_DEPTH` deep."""
    try:
        size = file.lstat().st_size
        if size > MAX_JSON_BYTES:
            raise CheckpointError(
                f"{file}: the {what} is {size:,} bytes, more than the {MAX_JSON_BYTES:,} bryo "
                "reads; the file is damaged or not bryo's."
            )
        with open(file, "rb") as handle:
            raw = handle.read(MAX_JSON_BYTES + 1)
    except OSError as error:
        raise CheckpointError(f"{file}: the {what} cannot be read ({error.strerror}).") from None
    try:
        value = json.loads(raw.decode("utf-8"))
    except RecursionError:
        value = None
        depth_exceeded = True
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CheckpointError(
            f"{file}: the {what} is not valid JSON ({error}); the file is damaged."
        ) from None
    else:
        depth_exceeded = _depth_exceeds(value, MAX_JSON_DEPTH)
    if depth_exceeded:
        raise CheckpointError(
            f"{file}: the {what} nests deeper than {MAX_JSON_DEPTH} levels; bryo writes "
            "shallow JSON, so the file is damaged or crafted."
        )
    return value


def read_manifest(folder: Path) -> dict[str, FileRecord]:
    """The manifest of a checkpoint folder: each file's size and SHA-256, checked against
    the manifest's own digest and the rules for file names."""
    file = folder / MANIFEST
    document = read_json(file, "manifest")
    if not (
        isinstance(document, dict)
        and document.get("format") == MANIFEST_FORMAT
        and isinstance(document.get("files"), dict)
        and isinstance(document.get("sha256"), str)
    ):
        raise CheckpointError(
            f"{file}: not a bryo checkpoint manifest (it needs `format`, `files` and "
            "`sha256`); the file is damaged."
        )
    if document.get("version") != MANIFEST_VERSION:
        raise CheckpointError(
            f"{file}: manifest version {document.get('version')!r}, this bryo reads version "
            f"{MANIFEST_VERSION}; restore it with the bryo that saved it."
        )
    if _files_digest(document["files"]) != document["sha256"]:
        raise CheckpointError(
            f"{file}: the manifest's SHA-256 does not match its contents; the manifest is "
            "damaged, so no file of this checkpoint can be checked. Restore an earlier one."
        )
    records = {}
    for name, record in document["files"].items():
        problem = _name_problem(name) or _record_problem(record)
        if problem:
            raise CheckpointError(f"{file}: the entry for {name!r} {problem}.")
        records[name] = FileRecord(record["size"], record["sha256"])
    return records


def check_file(folder: Path, name: str, record: FileRecord) -> Damage | None:
    """How the file `name` differs from its manifest record, if it does."""
    path = folder / name
    try:
        size = path.lstat().st_size
        found = _hash(path) if size == record.size else None
    except FileNotFoundError:
        return Damage(name, "is missing (deleted, or never written)", changed=False)
    except OSError as error:
        return Damage(name, f"cannot be read ({error.strerror})", changed=False)
    if found is None:
        return Damage(
            name,
            f"is {size:,} bytes, the manifest says {record.size:,} (truncated or overwritten)",
            changed=False,
        )
    if found.sha256 != record.sha256:
        return Damage(
            name, "does not match its SHA-256 (its bytes changed after saving)", changed=True
        )
    return None


def check_files(
    folder: Path, files: Mapping[str, Path], manifest: Mapping[str, FileRecord]
) -> list[Damage]:
    """Every way the files of `folder` differ from its manifest, by file name."""
    damages = [
        Damage(name, "is not in the checkpoint's manifest (added after saving)", changed=False)
        for name in files
        if name not in manifest and name != MANIFEST
    ]
    found = parallel(lambda item: check_file(folder, *item), manifest.items())
    damages.extend(damage for damage in found if damage is not None)
    return sorted(damages)


def is_sha256(text: str) -> bool:
    """Whether `text` is a SHA-256 digest as bryo writes them (64 lowercase hex digits)."""
    return bool(_HEX.fullmatch(text))


def _name_problem(name: str) -> str | None:
    parts = name.split("/")
    if (
        name == MANIFEST
        or any(part in ("", ".", "..") for part in parts)
        or any(bad in name for bad in ("\\", "\0"))
    ):
        return "is not a file name inside the checkpoint (an empty, `.` or `..` part)"
    return None


def _record_problem(record: object) -> str | None:
    if not isinstance(record, dict) or set(record) != {"size", "sha256"}:
        return "needs exactly `size` and `sha256`"
    size, digest = record["size"], record["sha256"]
    if type(size) is not int or size < 0:
        return f"has a size of {size!r}, not a byte count"
    if not isinstance(digest, str) or not is_sha256(digest):
        return "has a `sha256` that is not 64 hexadecimal digits"
    return None


# Hashing and syncing --------------------------------------------------------------------


def _hash(path: Path, sync: bool = False) -> FileRecord:
    """Size and SHA-256 of a file (opened without following a link), fsynced if `sync`."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise CheckpointError(f"{path}: not a regular file.")
        digest, size = hashlib.sha256(), 0
        while chunk := os.read(descriptor, _CHUNK):
            digest.update(chunk)
            size += len(chunk)
        if sync:
            os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return FileRecord(size, digest.hexdigest())


def _hash_and_sync(path: Path) -> FileRecord:
    return _hash(path, sync=True)


def _files_digest(files: object) -> str:
    canonical = json.dumps(files, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _sync_directory(directory: Path) -> None:
    """fsync a folder, so the names created or renamed in it survive a power loss."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:  # some filesystems cannot sync a folder; the renames still happened
        pass
    finally:
        os.close(descriptor)


def parallel(function: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """`[function(item) for item in items]` on a few threads (hashlib and file reads
    release the GIL, so large checkpoints hash at disk speed)."""
    items = list(items)
    if len(items) < 4:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(function, items))


def _depth_exceeds(value: object, limit: int) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` (checked without recursion)."""
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        children: Iterator[object]
        if isinstance(node, dict):
            children = iter(node.values())
        elif isinstance(node, list):
            children = iter(node)
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False
