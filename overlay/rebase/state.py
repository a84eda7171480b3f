"""The state of a rebase or sync run, typed, and its JSON form (``state.json``).

A run saves :class:`RunState` to ``.overlay/rebase/state.json`` before every next
step (:meth:`overlay.rebase.run.Rebase.save`) and reads it back on ``--continue``,
``--skip``, ``--drop``, ``--abort`` and ``--status``. The file's shape is a
contract with runs stopped by earlier versions of overlay: :meth:`RunState.to_json`
writes exactly the keys the untyped state of those versions had, and
:meth:`RunState.from_json` reads them, so such a run is continued or aborted as if
nothing had changed. Keys that appear only after a step (``stale``,
``merge_stats``, ``rr_recorded``, ``commit_started``) are left out until then,
and a field that is ``None`` here is a key that is absent there.

The file's one reader and writer are here (:func:`read_state_json`,
:func:`write_state`), on nothing of overlay but the layout and the file helpers:
:mod:`overlay.rebase.ondisk` (which judges what a run left) and :mod:`overlay.rebase`
(which saves each step) both build on it.
"""

import enum
import json
import os
from typing import Any, ClassVar, NamedTuple

from overlay import layout
from overlay.fs.atomic import atomic_write
from overlay.fs.reading import read_record
from overlay.lazy import lazy_pattern

#: The ``format`` a run writes; earlier versions wrote the same.
STATE_FORMAT = 1


class Fields:
    """``__eq__`` and ``__repr__`` over the ``__slots__`` of the run's typed records
    (here, :mod:`~overlay.rebase.ondisk`, :mod:`~overlay.rebase.plan`,
    :mod:`~overlay.rebase.recover`), as a dataclass has them (equal when of one class
    with equal fields; unhashable); their ``__init__`` is written out. Not dataclasses,
    which compile their methods from source at import: about 5 ms of a pin bump's
    CPU here (docs/engine.md, "Costs behind some choices")."""

    __slots__: tuple[str, ...] = ()
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def fields(self) -> dict[str, Any]:
        """``{name: value}`` of every field, in order."""
        return {n: getattr(self, n) for n in self.__slots__}


class PatchStatus(enum.StrEnum):
    """Where one patch of the series stands in a run (``PatchOutcome.status``); a
    ``str``, so the state file keeps the very words it always held."""

    PENDING = "pending"  #: not carried yet
    STOPPED = "stopped"  #: the run waits on it (a conflict, or an edit left it empty)
    CLEAN = "clean"  #: applied on its recorded pre-images: its file keeps its bytes
    MERGED = "merged"  #: a clean cherry-pick by merge-ort: its file is refreshed
    RESOLVED = "resolved"  #: the user's edit of a stop
    UPSTREAM = "upstream"  #: carrying it changes nothing: its file goes
    SKIPPED = "skipped"  #: left out by --skip/--drop: its file goes


#: The statuses of a patch that is in the new layer.
LANDED = frozenset({PatchStatus.CLEAN, PatchStatus.MERGED, PatchStatus.RESOLVED})
#: The statuses of a patch whose file the completed run deletes.
DROPPED = frozenset({PatchStatus.UPSTREAM, PatchStatus.SKIPPED})


class Phase(enum.Enum):
    """Which step a saved run is at, as its state says (:attr:`RunState.phase`)."""

    FORK_DELTA = "fork delta"  #: the fork delta is being settled on the new pin
    PATCHES = "patches"  #: the series is being carried
    COMMITTING = "committing"  #: the write phase: the records are (being) written


#: An rr-cache key.
_SHA256 = lazy_pattern(r"[0-9a-f]{64}")


def _str_list(value: Any, what: str) -> list[str]:
    """``value`` as a list of strings; ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{what} is not a list of strings")
    return list(value)


def _str(value: Any, what: str) -> str:
    """``value`` when it is a string; ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a string")
    return value


def _int(value: Any, what: str) -> int:
    """``value`` when it is an integer; ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} is not an integer")
    return value


def _opt_str(value: Any, what: str) -> str | None:
    """``value`` when it is a string or ``None``; ``ValueError`` naming ``what`` otherwise."""
    return None if value is None else _str(value, what)


class Bases(NamedTuple):
    """The three commits a layer stack is built from (full SHAs)."""

    pin: str
    fork: str
    merge_base: str

    def to_json(self) -> dict[str, str]:
        """``{"pin", "fork", "merge_base"}``, as the state and the report store it."""
        return {"pin": self.pin, "fork": self.fork, "merge_base": self.merge_base}

    @classmethod
    def from_json(cls, data: Any) -> "Bases":
        """Read :meth:`to_json`'s form. Raises ``ValueError`` when a commit is missing."""
        if not isinstance(data, dict):
            raise ValueError("the pins are not an object")
        return cls(
            _str(data.get("pin"), "pin"),
            _str(data.get("fork"), "fork"),
            _str(data.get("merge_base"), "merge_base"),
        )


class ResolutionOutcome(Fields):
    """How a conflicted path of the fork delta was settled.

    Attributes:
        status: ``unchanged`` (same conflict, same resolution), ``carried`` (the
            recorded resolution merged onto the new conflict), ``reused`` (the
            rr-cache knew this conflict) or ``resolved`` (by hand).
        blob: the resolution's blob id in the store.
        note: one sentence for the report.
    """

    __slots__ = ("status", "blob", "note")
    status: str
    blob: str
    note: str

    def __init__(self, status: str, blob: str, note: str) -> None:
        self.status, self.blob, self.note = status, blob, note

    def to_json(self) -> dict[str, str]:
        """``{"status", "blob", "note"}``."""
        return {"status": self.status, "blob": self.blob, "note": self.note}

    @classmethod
    def from_json(cls, data: Any) -> "ResolutionOutcome":
        """Read :meth:`to_json`'s form (``note`` may be absent). Raises ``ValueError``."""
        if not isinstance(data, dict):
            raise ValueError("a resolution is not an object")
        return cls(
            _str(data.get("status"), "a resolution's status"),
            _str(data.get("blob"), "a resolution's blob"),
            _str(data.get("note", ""), "a resolution's note"),
        )


class PatchOutcome(Fields):
    """Where one patch of the series stands in the run.

    Attributes:
        name: the patch's file name in ``patches-rocm/``.
        status: ``pending``, ``stopped`` (the run waits on it), ``clean`` (applied
            on its recorded pre-images), ``merged``, ``resolved`` (by hand),
            ``upstream`` (carrying it changes nothing) or ``skipped`` (dropped).
        tree: the layer's tree after the patch; set (with ``blob`` and
            ``changed``) once the patch is carried, else ``None``.
        blob: the refreshed patch file's blob id, ``None`` when the file keeps its
            bytes (``clean``).
        changed: the refreshed patch differs from the file.
        note: one sentence for the report, ``None`` when the step made none.
    """

    __slots__ = ("name", "status", "tree", "blob", "changed", "note")
    name: str
    status: str
    tree: str | None
    blob: str | None
    changed: bool
    note: str | None

    def __init__(
        self,
        name: str,
        status: str = "pending",
        tree: str | None = None,
        blob: str | None = None,
        changed: bool = False,
        note: str | None = None,
    ) -> None:
        self.name, self.status, self.tree, self.blob = name, status, tree, blob
        self.changed, self.note = changed, note

    def carried(
        self,
        status: str,
        tree: str,
        blob: str | None,
        changed: bool,
        note: str | None = None,
    ) -> None:
        """Record that the patch landed on ``tree`` with ``status``."""
        self.status, self.tree, self.blob, self.changed = status, tree, blob, changed
        if note is not None:
            self.note = note

    @property
    def landed(self) -> bool:
        """The patch is in the new layer (its ``tree`` is the layer after it)."""
        return self.status in LANDED

    def to_json(self) -> dict[str, Any]:
        """``{"name", "status"}``, with ``tree``, ``blob`` and ``changed`` once carried
        and ``note`` when there is one."""
        out: dict[str, Any] = {"name": self.name, "status": self.status}
        if self.tree is not None:
            out.update(tree=self.tree, blob=self.blob, changed=self.changed)
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def from_json(cls, data: Any) -> "PatchOutcome":
        """Read :meth:`to_json`'s form. Raises ``ValueError``."""
        if not isinstance(data, dict):
            raise ValueError("a patch entry is not an object")
        return cls(
            _str(data.get("name"), "a patch's name"),
            _str(data.get("status"), "a patch's status"),
            _opt_str(data.get("tree"), "a patch's tree"),
            _opt_str(data.get("blob"), "a patch's blob"),
            bool(data.get("changed", False)),
            _opt_str(data.get("note"), "a patch's note"),
        )


class ResolutionStop(Fields):
    """The run waits for the user to resolve a fork-delta conflict at ``path``.

    Attributes:
        path: the conflicted path; its work file is ``.overlay/rebase/work/<path>``.
        key: the conflict's rr-cache key (the resolution is recorded under it).
        mode: the file mode of the path in the merge.
        recorded: the path had a recorded resolution (it is beside the work file).
    """

    type: ClassVar[str] = "resolution"
    __slots__ = ("path", "key", "mode", "recorded")
    path: str
    key: str
    mode: str
    recorded: bool

    def __init__(self, path: str, key: str, mode: str, recorded: bool) -> None:
        self.path, self.key, self.mode, self.recorded = path, key, mode, recorded

    @property
    def what(self) -> str:
        """The path or patch the run stopped at, for ``--status``."""
        return self.path


class PatchStop(Fields):
    """The run waits on a patch that conflicts with the new layer.

    Attributes:
        name: the patch's file name.
        tree: the layer below the patch.
        merged: merge-ort's tree (conflicted paths as it left them).
        files: the conflicted paths the user edits under the work directory.
        modes: their file modes.
        gitlinks: conflicted submodule paths (kept as the new base has them);
            ``None`` where the patch could not be merged at all (no such key).
        keys: path -> the rr-cache key of its content conflict, for the paths whose
            resolution ``--continue`` records (:mod:`overlay.rebase.rerere`);
            ``None`` when there are none (no such key).
    """

    type: ClassVar[str] = "patch"
    __slots__ = ("name", "tree", "merged", "files", "modes", "gitlinks", "keys")
    name: str
    tree: str
    merged: str
    files: list[str]
    modes: dict[str, str]
    gitlinks: list[str] | None
    keys: dict[str, str] | None

    def __init__(
        self,
        name: str,
        tree: str,
        merged: str,
        files: list[str],
        modes: dict[str, str],
        gitlinks: list[str] | None = None,
        keys: dict[str, str] | None = None,
    ) -> None:
        self.name, self.tree, self.merged = name, tree, merged
        self.files, self.modes, self.gitlinks, self.keys = files, modes, gitlinks, keys

    @property
    def what(self) -> str:
        """The path or patch the run stopped at, for ``--status``."""
        return self.name


class EmptyStop(Fields):
    """The user's edit left patch ``name`` empty: it goes only with ``--drop``/``--skip``."""

    type: ClassVar[str] = "empty"
    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def what(self) -> str:
        """The path or patch the run stopped at, for ``--status``."""
        return self.name


#: Why a run waits for the user (``state.json``'s ``stop``, tagged by its ``type``).
Stop = ResolutionStop | PatchStop | EmptyStop


def stop_to_json(stop: Stop) -> dict[str, Any]:
    """The ``stop`` object: ``type`` and the stop's fields (``gitlinks`` only when set)."""
    out: dict[str, Any] = {"type": stop.type}
    out.update((k, v) for k, v in stop.fields().items() if v is not None)
    return out


def stop_from_json(data: Any) -> Stop:
    """Read :func:`stop_to_json`'s form. Raises ``ValueError`` for an unknown type."""
    if not isinstance(data, dict):
        raise ValueError("the stop is not an object")
    kind = data.get("type")
    if kind == "resolution":
        return ResolutionStop(
            _str(data.get("path"), "the stop's path"),
            _str(data.get("key"), "the stop's key"),
            _str(data.get("mode"), "the stop's mode"),
            bool(data.get("recorded")),
        )
    if kind == "patch":
        modes = data.get("modes", {})
        if not isinstance(modes, dict):
            raise ValueError("the stop's modes are not an object")
        gitlinks = data.get("gitlinks")
        keys = data.get("keys")
        if keys is not None and not (
            isinstance(keys, dict)
            and all(
                isinstance(k, str) and isinstance(v, str) and _SHA256.fullmatch(v)
                for k, v in keys.items()
            )
        ):
            # --continue writes rr-cache files by these names: nothing else may be named.
            raise ValueError("the stop's keys are not sha256 keys by path")
        return PatchStop(
            _str(data.get("name"), "the stop's patch"),
            _str(data.get("tree"), "the stop's tree"),
            _str(data.get("merged"), "the stop's merged tree"),
            _str_list(data.get("files"), "the stop's files"),
            {str(k): str(v) for k, v in modes.items()},
            None if gitlinks is None else _str_list(gitlinks, "the stop's gitlinks"),
            None if keys is None else dict(keys),
        )
    if kind == "empty":
        return EmptyStop(_str(data.get("name"), "the stop's patch"))
    raise ValueError(f"the stop's type {kind!r} is unknown")


class RunState(Fields):
    """A rebase or sync in progress, as ``.overlay/rebase/state.json`` holds it.

    Attributes:
        kind: ``"rebase"`` (new pin) or ``"sync"`` (new fork commit).
        old, new: the bases before and after.
        backup: the overlay files backed up at the start (relative paths).
        resolutions: path -> how its fork-delta conflict was settled.
        forked: the fork layer's tree on the new pin, once settled.
        patches: one entry per series patch, in order (filled once ``forked`` is).
        stop: why the run waits for the user, ``None`` while it does not.
        committing: the run has begun its write phase (Ctrl-C is held back).
        commit_started: the records may be partly rewritten (only a kill leaves this).
        stale: resolutions that no longer conflict (removed when the run completes);
            ``None`` until the fork delta is settled.
        merge_stats: ``{"carried": n, "conflicts": n}`` of the fork-delta merge.
        rr_recorded: rr-cache keys this run recorded (``--abort`` forgets them).
        warnings: every warning the command gave when the run started (a pin moved
            backwards and the retarget entries citing commits it lacks, a fork carried
            ahead of the pin), for the report a reviewer reads.
        fork_branch: the ``[fork] branch`` the run records when it completes (a sync
            to another fork branch); ``None`` keeps the manifest's.
        format: :data:`STATE_FORMAT`.
    """

    __slots__ = (
        "kind",
        "old",
        "new",
        "backup",
        "resolutions",
        "forked",
        "patches",
        "stop",
        "committing",
        "commit_started",
        "stale",
        "merge_stats",
        "rr_recorded",
        "warnings",
        "fork_branch",
        "format",
    )
    kind: str
    old: Bases
    new: Bases
    backup: list[str]
    resolutions: dict[str, ResolutionOutcome]
    forked: str | None
    patches: list[PatchOutcome]
    stop: Stop | None
    committing: bool
    commit_started: bool
    stale: list[str] | None
    merge_stats: dict[str, int] | None
    rr_recorded: list[str]
    warnings: list[str]
    fork_branch: str | None
    format: int

    def __init__(
        self,
        kind: str,
        old: Bases,
        new: Bases,
        backup: list[str],
        resolutions: dict[str, ResolutionOutcome] | None = None,
        forked: str | None = None,
        patches: list[PatchOutcome] | None = None,
        stop: Stop | None = None,
        committing: bool = False,
        commit_started: bool = False,
        stale: list[str] | None = None,
        merge_stats: dict[str, int] | None = None,
        rr_recorded: list[str] | None = None,
        warnings: list[str] | None = None,
        fork_branch: str | None = None,
        format: int = STATE_FORMAT,
    ) -> None:
        self.kind, self.old, self.new, self.backup = kind, old, new, backup
        # None: a new dict or list of this state's own (a dataclass's default_factory)
        self.resolutions = {} if resolutions is None else resolutions
        self.patches, self.forked = [] if patches is None else patches, forked
        self.stop, self.committing = stop, committing
        self.commit_started, self.stale = commit_started, stale
        self.merge_stats = merge_stats
        self.rr_recorded = [] if rr_recorded is None else rr_recorded
        self.warnings = [] if warnings is None else warnings
        self.fork_branch, self.format = fork_branch, format

    @property
    def phase(self) -> Phase:
        """The step the run is at: writing the records once it began its write phase
        (``committing``), else the series once the fork layer is settled, else the fork
        delta."""
        if self.committing or self.commit_started:
            return Phase.COMMITTING
        return Phase.FORK_DELTA if self.forked is None else Phase.PATCHES

    def patch(self, name: str) -> PatchOutcome:
        """The entry of patch ``name``. Raises ``StopIteration`` when there is none."""
        return next(e for e in self.patches if e.name == name)

    def to_json(self) -> dict[str, Any]:
        """The object ``state.json`` holds (keys as earlier versions wrote them)."""
        out: dict[str, Any] = {
            "format": self.format,
            "kind": self.kind,
            "old": self.old.to_json(),
            "new": self.new.to_json(),
            "backup": list(self.backup),
            "resolutions": {p: r.to_json() for p, r in self.resolutions.items()},
            "forked": self.forked,
            "patches": [p.to_json() for p in self.patches],
            "stop": None if self.stop is None else stop_to_json(self.stop),
            "committing": self.committing,
        }
        if self.commit_started:
            out["commit_started"] = True
        if self.stale is not None:
            out["stale"] = list(self.stale)
        if self.merge_stats is not None:
            out["merge_stats"] = dict(self.merge_stats)
        if self.rr_recorded:
            out["rr_recorded"] = list(self.rr_recorded)
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if self.fork_branch is not None:
            out["fork_branch"] = self.fork_branch
        return out

    def dumps(self) -> bytes:
        """The bytes of ``state.json``: :meth:`to_json` on one line, keys sorted.

        Not indented: :mod:`json` encodes an indented document in Python, a tenth of a
        pin bump's own work for its five saves (``overlay rebase --status`` is what
        a person reads)."""
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: Any) -> "RunState":
        """Read the object :meth:`to_json` (or an earlier version) wrote.

        Raises:
            ValueError: a key is missing or of the wrong type (the message says which).
        """
        if not isinstance(data, dict):
            raise ValueError("state.json does not hold an object")
        resolutions = data.get("resolutions")
        patches = data.get("patches")
        if not isinstance(resolutions, dict) or not isinstance(patches, list):
            raise ValueError("state.json lacks the patches or the resolutions")
        stale = data.get("stale")
        stats = data.get("merge_stats")
        if stats is not None and not isinstance(stats, dict):
            raise ValueError("the merge stats are not an object")
        return cls(
            kind=_str(data.get("kind"), "the run kind"),
            old=Bases.from_json(data.get("old")),
            new=Bases.from_json(data.get("new")),
            backup=_str_list(data.get("backup"), "the backup list"),
            resolutions={
                str(p): ResolutionOutcome.from_json(r) for p, r in resolutions.items()
            },
            forked=_opt_str(data.get("forked"), "the fork layer"),
            patches=[PatchOutcome.from_json(p) for p in patches],
            stop=None if data.get("stop") is None else stop_from_json(data["stop"]),
            committing=bool(data.get("committing", False)),
            commit_started=bool(data.get("commit_started", False)),
            stale=None if stale is None else _str_list(stale, "the stale list"),
            merge_stats=None if stats is None else dict(stats),
            rr_recorded=_str_list(data.get("rr_recorded", []), "rr_recorded"),
            warnings=_str_list(data.get("warnings", []), "the warnings"),
            fork_branch=_opt_str(data.get("fork_branch"), "the fork branch"),
            format=_int(data.get("format", STATE_FORMAT), "the format"),
        )


def read_state_json(root: str) -> Any:
    """``.overlay/rebase/state.json`` of ``root``, decoded (any JSON value: the caller
    checks its shape), read as a record: a regular file inside the repository, not a
    symlink, size-capped.

    Raises:
        RecordError: the file is missing, refused or unreadable (exit 2);
        UnicodeDecodeError, ValueError, RecursionError: it is not valid JSON.
    """
    raw = read_record(
        root, layout.REBASE_STATE, what="rebase state", allow_symlink=False
    )
    return json.loads(raw.decode("utf-8"))


def write_state(state_dir: str, state: RunState) -> None:
    """Write ``state`` as ``state.json`` in ``state_dir`` (the run's state directory,
    or the one a start builds beside it).

    Rename-atomic, not fsynced: a killed process leaves the old or the new state,
    never a torn one; a power loss may cost the last step, which is redone.

    Raises:
        OSError: it cannot be written.
    """
    atomic_write(
        os.path.join(state_dir, layout.STATE_JSON), state.dumps(), durable=False
    )
