"""The edit in progress (``.overlay/edit.json``), the records' lock, and where in the
series an edit sits."""

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from overlay import layout
from overlay.errors import OverlayError
from overlay.fs.atomic import atomic_write
from overlay.fs.records_lock import state_lock
from overlay.lazy import lazy_pattern

if TYPE_CHECKING:
    from overlay.engine.layers import Layers

#: The work tree's branch.
BRANCH = "refs/heads/overlay-edit"
#: A new patch's name: one file name, letters, digits, ``.``, ``_``, ``-`` (quilt's habit).
_NAME_RE = lazy_pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclasses.dataclass
class Session:
    """The edit in progress, as ``.overlay/edit.json`` holds it.

    Attributes:
        name: the patch file name (``0012-bounds-check.patch``).
        new: true for ``--new`` (the patch does not exist yet).
        after: for a new patch, the series entry it goes after (``None``: the end).
        base: the tree the patch is made on (the layer below it).
        start: the tree the work tree was checked out at (``base`` for a new patch,
            the patch's result for an existing one).
        patch_sha256: sha256 of the patch file when the edit began (existing patch).
        directory: the work tree, relative to the repository.
    """

    name: str
    new: bool
    after: str | None
    base: str
    start: str
    patch_sha256: str | None
    directory: str

    def workdir(self, root: str) -> str:
        """The work tree's absolute path."""
        return os.path.join(root, self.directory)


@dataclasses.dataclass
class Started:
    """What :func:`start_edit` prepared.

    Attributes:
        session: the edit now in progress.
        workdir: the work tree (absolute).
        below: patches the work tree holds below the edited one (names).
        resumed: true when the same edit was already prepared (nothing was redone).
        completed: a record a kill had interrupted, completed first
            (:class:`overlay.edit.finish.Completed`), or ``None``.
        from_spare: the work tree was made from the spare the last edit left
            (:func:`overlay.edit.worktree.make_worktree`), not checked out anew.
    """

    session: Session
    workdir: str
    below: list[str]
    resumed: bool = False
    completed: Any = None
    from_spare: bool = False


# -- state and lock -----------------------------------------------------------------------


@contextlib.contextmanager
def records_locked(root: str, command: str) -> Iterator[None]:
    """Hold the records' lock (:func:`overlay.fs.records_lock.state_lock`, the one a rebase,
    ``refresh`` and ``fix new`` take) for the block: ``edit``/``record`` read and write
    the same records, so they must not interleave with those or with each other; a
    second command is refused at once, naming the holder."""
    with state_lock(root, command):
        yield


def load_session(root: str) -> Session | None:
    """The edit in progress at ``root``, or ``None``.

    Args:
        root: overlay repository.
    Returns:
        The :class:`Session` from ``.overlay/edit.json``, or ``None`` when there is none.
    Raises:
        OverlayError: the state file is unreadable or malformed (exit 2); the hint
            names ``overlay edit --abort``.
    """
    path = os.path.join(root, layout.EDIT_STATE)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return Session(**{f.name: data[f.name] for f in dataclasses.fields(Session)})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        raise OverlayError(
            f"{layout.EDIT_STATE} is unreadable or not an overlay edit state",
            hint="throw the edit away with `overlay edit --abort`",
        ) from None


def save_session(root: str, session: Session) -> None:
    """Write ``.overlay/edit.json`` (temp + rename)."""
    atomic_write(
        os.path.join(root, layout.EDIT_STATE),
        (json.dumps(dataclasses.asdict(session), indent=2) + "\n").encode(),
    )


def refuse_during_run(root: str) -> None:
    """Refuse an edit or a record while a rebase or sync is in progress (exit 2).

    The run state's modules load only when its directory (``.overlay/rebase/``) is
    there, as :func:`overlay.cli.tools.run_note` does."""
    if not layout.run_state_present(root):
        return
    # rebase.ondisk: only when a run's state directory is there
    from overlay.rebase.ondisk import run_in_progress

    kind = run_in_progress(root)
    if kind is not None:
        raise OverlayError(
            f"a {kind} is in progress: patches are not edited or recorded during it",
            hint=f"finish it with `overlay {kind} --continue` (or undo it with "
            f"`overlay {kind} --abort`) first",
        )


def refuse_during_edit(root: str, command: str) -> None:
    """Refuse to start a rebase or sync while an edit is open (exit 2): the run would
    move the layer under the edit, and ``record`` would then refuse it.

    Args:
        root: overlay repository.
        command: the refused command, as the user typed it (``rebase``, ``sync``).
    Raises:
        OverlayError: an edit is in progress, or a record of one was interrupted.
    """
    current = None
    try:
        current = load_session(root)
        name = current.name if current is not None else None
    except OverlayError:
        name = "a patch (its state file is unreadable)"
    if name is None and os.path.isdir(os.path.join(root, layout.RECORD_JOURNAL)):
        name = "a patch (its `overlay record` was interrupted)"
    if name is None:
        return
    where = f" in {current.directory}" if current is not None else ""
    raise OverlayError(
        f"an edit of {name} is open{where}: `overlay {command}` is not started under "
        "it (it would move the layer the edit is made on)",
        hint="finish the edit with `overlay record`, or throw it away with "
        f"`overlay edit --abort`; then run `overlay {command}` again",
    )


# -- positions in the series ----------------------------------------------------------------


def patch_file_name(name: str) -> str:
    """The patch file name for ``--new NAME``: ``NAME`` plus ``.patch`` when it lacks it.

    Raises:
        OverlayError: not one plain file name of letters, digits, ``.``, ``_``, ``-`` (exit 2).
    """
    stem = name[: -len(".patch")] if name.endswith(".patch") else name
    if not _NAME_RE.match(stem) or stem in (".", ".."):
        raise OverlayError(
            f"bad patch name {name!r}",
            hint="use letters, digits, '.', '_' and '-', e.g. 0012-bounds-check",
        )
    return stem + ".patch"


def stem(name: str) -> str:
    """``name`` without its ``.patch`` (the work tree's directory name)."""
    return name[: -len(".patch")] if name.endswith(".patch") else name


def _index(layers: "Layers", name: str, option: str = "") -> int:
    """Where patch ``name`` is in the series; ``OverlayError`` when it is not
    (``option``: the option that named it, ``--after``, for the message)."""
    names = [r.patch.name for r in layers.patches]
    if name not in names:
        raise OverlayError(
            f"{option + ' ' if option else ''}{name} is not in {layout.SERIES}",
            hint="name a patch of the series (`overlay status` lists them)"
            + ("" if option else ", or use --new NAME"),
        )
    return names.index(name)


def _tree_after(layers: "Layers", index: int) -> str:
    """The tree after patch ``index`` (``-1``: the layer below the series)."""
    if index < 0:
        return layers.forked
    tree = layers.patches[index].tree
    if tree is None:  # computed without stepwise: a bug of the caller
        raise ValueError("the layers must be computed with stepwise=True")
    return tree


def where(
    layers: "Layers", name: str, new: bool, after: str | None
) -> tuple[str, str, int]:
    """``(base, start, index of the first later patch)`` for an edit of ``name``."""
    if new:
        at = (
            len(layers.patches) - 1
            if after is None
            else _index(layers, after, "--after")
        )
        base = _tree_after(layers, at)
        return base, base, at + 1
    at = _index(layers, name)
    return _tree_after(layers, at - 1), _tree_after(layers, at), at + 1
