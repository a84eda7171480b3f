"""The run's state on disk and the tools every step uses (:class:`RunBase`).

:class:`RunBase` holds what the steps of a run share: the state (loaded, saved,
started), the blob reader, ``git merge-file``, the rr-cache, the work files and
the layers at the old bases. The steps themselves live beside it
(:mod:`.forkdelta`, :mod:`.patches`, :mod:`.commit`, :mod:`.recover`) and
:class:`overlay.rebase.run.Rebase` puts them together.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from overlay import layout
from overlay.digests import sha256
from overlay.engine.layers import Layers, compute_layers
from overlay.errors import EXIT_FINDINGS, GitError, OverlayError
from overlay.fs.atomic import atomic_write, input_files, kill_point, remove_dir
from overlay.git.loose import write_typed
from overlay.git.store import CatFile, Store
from overlay.git.treemodel import blob_name
from overlay.rebase.backup import Backup, read_backup, write_backup
from overlay.rebase.ondisk import (
    StateOnDisk,
    inspect_state,
    wedged_hint,
)
from overlay.rebase.state import Bases, PatchStatus, RunState, write_state
from overlay.records.manifest import Manifest
from overlay.records.resolutions import read_resolutions
from overlay.records.series import Patch, parse_patch

if TYPE_CHECKING:
    from overlay.workspace import Workspace

#: git's conflict stages of one path: stage (1 base, 2 ours, 3 theirs) -> (mode, oid).
Stages = Mapping[int, tuple[str, str]]


def stage_oids(stages: Stages) -> tuple[str, str, str]:
    """The blob names of stages 1, 2 and 3 (``""`` for a missing one): all that
    :meth:`RunBase._labelled`'s text depends on besides its labels. Two conflicts with
    the same names have the same text (a missing stage and the empty blob both give
    ``b""``, so equal names are enough, not needed)."""

    def oid(n: int) -> str:
        return stages[n][1] if n in stages else ""

    return oid(1), oid(2), oid(3)


class RebaseStopped(OverlayError):
    """The run stopped at a conflict and waits for the user (exit 1)."""

    exit_code = EXIT_FINDINGS


# Test hook: OVERLAY_TEST_KILL_AT=<name> SIGKILLs the process there.
_checkpoint = kill_point


def tracked_files(
    root: str, resolutions: Mapping[str, bytes] | None = None
) -> list[str]:
    """The overlay files a run may change (relative paths): manifest, series, patches,
    resolutions, LOCAL_FIXES.md; only those that exist.

    Args:
        root: the overlay repository.
        resolutions: :func:`read_resolutions` of ``root`` when the caller has it.
    """
    out = [layout.MANIFEST, layout.SERIES, layout.LOCAL_FIXES]
    pdir = os.path.join(root, layout.PATCH_DIR)
    if os.path.isdir(pdir):
        out += [
            f"{layout.PATCH_DIR}/{fn}"
            for fn in sorted(os.listdir(pdir))
            if fn.endswith(".patch")
        ]
    for rel in read_resolutions(root) if resolutions is None else resolutions:
        out.append(f"{layout.RESOLVED_DIR}/{rel}")
    return [p for p in out if os.path.isfile(os.path.join(root, p))]


class RunBase:
    """A rebase or sync run's state and shared tools, persisted under ``.overlay/rebase/``.

    Args:
        ws: the workspace: the run's root and store, and the manifest it reads (once per
            command; the file is not changed until the run completes, when the workspace
            forgets it: :meth:`Workspace.forget_records`).
    Raises:
        ManifestError: there is no overlay repository (exit 2).
        GitError: the store cannot be opened (exit 2).
    """

    def __init__(self, ws: Workspace):
        self.ws = ws
        self.root = os.path.abspath(ws.root)
        self.store: Store = ws.store
        self.dir = os.path.join(self.root, layout.REBASE_STATE_DIR)
        self.work = os.path.join(self.dir, layout.WORK)
        self._state: RunState | None = None
        self._cat: CatFile | None = None
        self._patches: dict[str, Patch] = {}
        # The run's backup (written by start, else read on first use).
        self._backup: Backup | None = None
        self._old: Layers | None = None
        self._old_done = False
        # The resolutions as :meth:`start` read them (and backed them up): the run's
        # input, read once; ``None`` in a process that did not start the run.
        self._start_resolutions: dict[str, bytes] | None = None
        # Blobs named (SHA-1, in Python) but not yet written: they go to the store with
        # the fork layer's trees in one process (see :meth:`_blob_name`).
        self._new_blobs: dict[str, bytes] = {}
        # merge-file results of this process, keyed on every input (see _labelled).
        self._merged: dict[tuple, bytes] = {}
        #: Where the run says what it did on its own as it does it (a replayed
        #: resolution): the CLI prints each line; quiet by default.
        self.say: Callable[[str], None] = lambda _line: None

    # -- state ----------------------------------------------------------------------
    @property
    def state(self) -> RunState:
        """The run's state (after :meth:`load` or :meth:`start`)."""
        if self._state is None:
            raise RuntimeError("no rebase state loaded: call load() or start() first")
        return self._state

    @state.setter
    def state(self, value: RunState) -> None:
        self._state = value

    @property
    def active(self) -> bool:
        """True when a run is in progress, or its state is wedged (see :meth:`inspect`)."""
        return self.inspect().present

    def inspect(self) -> StateOnDisk:
        """What the state directory holds (:func:`overlay.rebase.ondisk.inspect_state`)."""
        return inspect_state(self.root)

    def load(self, info: StateOnDisk | None = None) -> None:
        """Read the saved state.

        Args:
            info: the state directory as the caller inspected it (:meth:`inspect`)
                under the records' lock it still holds, so it is not inspected again;
                ``None``: inspected here.
        Raises:
            OverlayError: no run in progress, or its state is wedged (then the
            message says why and the hint that ``--abort`` recovers it; exit 2).
        """
        if info is None:
            info = self.inspect()
        if not info.present:
            raise OverlayError(
                "no rebase or sync in progress",
                hint="start one with `overlay rebase --onto SHA`",
            )
        if info.problem or info.state is None:
            raise OverlayError(
                f"the {info.kind} state is wedged: {info.problem}; "
                "it cannot be continued",
                hint=wedged_hint(info.kind),
            )
        self.state = info.state
        self._backup = info.backup

    def save(self) -> None:
        """Write the state atomically.

        Raises:
            OverlayError: the state directory is gone (exit 2). It is never made
            again here: a state without its backup is what a second command
            removing the directory under a first one would leave.
        """
        if not os.path.isdir(self.dir):
            kind = self._state.kind if self._state is not None else "rebase"
            raise OverlayError(
                f"{layout.REBASE_STATE_DIR} vanished while the {kind} ran; "
                "the state is not written again without its backup",
                hint="check `git status`; restore the records with git if they changed",
            )
        write_state(self.dir, self.state)

    def _discard_dir(self) -> None:
        """Remove the state directory as one step: renamed away first, so a kill
        during the removal leaves no half state (the sweep removes the rest)."""
        old = os.path.join(self.root, layout.REBASE_STATE_OLD)
        if os.path.lexists(old):
            remove_dir(old)
        os.rename(self.dir, old)
        remove_dir(old)

    def start(
        self,
        kind: str,
        new: Bases,
        old: Bases,
        info: StateOnDisk | None = None,
        warnings: Sequence[str] = (),
        fork_branch: str | None = None,
    ) -> None:
        """Begin a run: back up every file it may change and save the plan.

        Args:
            kind: ``"rebase"`` (new pin) or ``"sync"`` (new fork commit).
            new, old: the bases after and before.
            info: the state directory as the caller inspected it under the records'
                lock it still holds (:func:`overlay.rebase.ondisk.refuse_if_in_progress`),
                so it is not inspected again; ``None``: inspected here.
            warnings: every warning the command gave before the run (the plan's,
                :attr:`RunPlan.warnings`, and :func:`overlay.rebase.plan.start_checks`'),
                kept in the state for the report.
            fork_branch: the ``[fork] branch`` the run records (``None``: kept).
        Raises:
            OverlayError: a run is already in progress (exit 2).
        """
        if info is None:
            info = self.inspect()
        if info.present:
            raise OverlayError(
                f"a {info.kind} is already in progress",
                hint="finish it with --continue / --skip, or --abort it",
            )
        # Built beside its place and renamed into it: the state directory appears
        # whole (backup and state.json) or not at all, whenever the process dies.
        new_dir = os.path.join(self.root, layout.REBASE_STATE_NEW)
        if os.path.lexists(new_dir):
            remove_dir(new_dir)
        os.makedirs(new_dir)
        try:
            resolutions = read_resolutions(self.root)
            files = tracked_files(self.root, resolutions)
            self._backup = write_backup(new_dir, self.root, files)
            self.state = RunState(
                kind=kind,
                old=old,
                new=new,
                backup=files,
                warnings=list(warnings),
                fork_branch=fork_branch,
            )
            write_state(new_dir, self.state)
            _checkpoint("start")
            if os.path.isdir(self.dir):
                remove_dir(self.dir)  # an empty leftover (inspect found nothing in it)
            os.rename(new_dir, self.dir)
        except BaseException:
            # A Ctrl-C or an error before the rename: nothing started, nothing left
            # (a killed process leaves the directory to the next run's sweep).
            if os.path.isdir(new_dir):
                remove_dir(new_dir)
            raise
        self._start_resolutions = resolutions

    # -- blobs and merges -------------------------------------------------------------
    def _blob(self, oid: str) -> bytes:
        """The bytes of blob ``oid`` (one persistent ``cat-file`` per run: the store's
        reader inside :meth:`Store.reading`, which :meth:`Rebase.run` opens)."""
        reader = self.store.reader
        if reader is not None:
            return reader.read(oid)[1]
        if self._cat is None:
            self._cat = self.store.cat_file()
        return self._cat.read(oid)[1]

    def _blob_name(self, data: bytes) -> str:
        """The name of ``data`` as a blob of the store. In a SHA-1 store it is computed
        here and the write waits for :meth:`_flush_blobs` (or the fork layer's one write,
        :func:`overlay.git.treemodel.edit_tree`): one write for every blob of the run
        (:func:`overlay.git.loose.write_typed`) instead of one ``hash-object`` each.
        Every save of a state that names such a blob comes after that write, so a kill
        never leaves a state naming a blob the store lacks."""
        if len(self.state.new.pin) != 40:
            return self.store.hash_blob(data)
        oid = blob_name(data)
        self._new_blobs[oid] = data
        return oid

    def _flush_blobs(self) -> None:
        """Write the blobs :meth:`_blob_name` named and did not write yet (one process)."""
        if self._new_blobs:
            write_typed(
                self.store.git_dir,
                {oid: ("blob", d) for oid, d in self._new_blobs.items()},
            )
            self._new_blobs = {}

    def close(self) -> None:
        """Stop the persistent blob reader."""
        if self._cat is not None:
            self._cat.close()
            self._cat = None

    def _merge_file(
        self,
        ours: bytes,
        base: bytes,
        theirs: bytes,
        labels: tuple[str, str, str],
        diff3: bool = False,
        marker_size: int | None = None,
    ) -> tuple[bytes, bool]:
        """``git merge-file -p`` on three texts (``--diff3`` adds the base section,
        ``marker_size`` longer markers); returns ``(result, clean)``."""
        with input_files((ours, base, theirs)) as (paths, fds):
            proc = self.store.git(
                "merge-file",
                "-p",
                *(["--diff3"] if diff3 else []),
                *([f"--marker-size={marker_size}"] if marker_size else []),
                "-L",
                labels[0],
                "-L",
                labels[1],
                "-L",
                labels[2],
                *paths,
                check=False,
                pass_fds=fds,
            )
        if proc.returncode < 0 or proc.returncode > 127:
            raise GitError(f"git merge-file failed: {proc.stderr.decode().strip()}")
        return proc.stdout, proc.returncode == 0

    def _stage_text(self, stages: Stages, n: int) -> bytes:
        """The text of stage ``n`` (``b""`` when that side lacks the path)."""
        entry = stages.get(n)
        return self._blob(entry[1]) if entry else b""

    def _labelled(self, stages: Stages, bases: Bases | None) -> bytes:
        """git's conflicted text for one path; markers name the commits, or just the
        sides when ``bases`` is ``None`` (so texts from two runs can be compared)."""
        labels = (
            ("pin", "merge base", "fork")
            if bases is None
            else (
                f"pin {bases.pin[:8]}",
                f"merge base {bases.merge_base[:8]}",
                f"fork {bases.fork[:8]}",
            )
        )
        # Kept for the process, keyed on every input of the merge: the three blob names
        # (a missing stage is the empty text), the labels and the style.
        key = (stage_oids(stages), labels, bases is not None)
        text = self._merged.get(key)
        if text is None:
            text, _ = self._merge_file(
                self._stage_text(stages, 2),
                self._stage_text(stages, 1),
                self._stage_text(stages, 3),
                labels,
                diff3=bases is not None,
            )
            self._merged[key] = text
        return text

    # -- the rr-cache -----------------------------------------------------------------
    @staticmethod
    def _conflict_key(text: bytes) -> str:
        """rerere-like identity of a conflict: the whole conflicted text with the marker
        labels stripped (the resolution is a whole file, so everything must match)."""
        normalized = re.sub(rb"(?m)^(<{7}|>{7}|\|{7}) .*$", rb"\1", text)
        return sha256(normalized).hexdigest()

    def _rr_get(self, key: str) -> bytes | None:
        """The resolution recorded for conflict ``key``, or ``None``."""
        path = os.path.join(self.root, layout.RR_CACHE, key)
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def _rr_put(self, key: str, data: bytes, path: str) -> None:
        """Record a resolution for later runs; the run remembers it so ``--abort``
        forgets it."""
        os.makedirs(os.path.join(self.root, layout.RR_CACHE), exist_ok=True)
        atomic_write(os.path.join(self.root, layout.RR_CACHE, key), data)
        atomic_write(
            os.path.join(self.root, layout.RR_CACHE, key + ".path"),
            path.encode("utf-8", "surrogateescape"),
        )
        self.state.rr_recorded.append(key)

    # -- work files, manifest, old layers ---------------------------------------------
    def _write_work(self, files: Mapping[str, bytes | None]) -> list[str]:
        """Replace the work directory with ``files`` (``None``: only its directory)."""
        if os.path.isdir(self.work):
            remove_dir(self.work)
        written = []
        for rel, data in files.items():
            full = os.path.join(self.work, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            if data is not None:
                atomic_write(full, data)
                written.append(rel)
        return written

    def _manifest(self) -> Manifest:
        """The manifest as the command read it (:attr:`Workspace.manifest`): the file is
        unchanged until the run completes."""
        return self.ws.manifest

    def _current_tree(self) -> str:
        """The new layer's tree after the last patch carried so far."""
        tree = self.state.forked
        assert tree is not None, "the fork delta is settled before any patch"
        for entry in self.state.patches:
            if entry.landed:
                assert entry.tree is not None
                tree = entry.tree
            elif entry.status == PatchStatus.PENDING:
                break
        return tree

    def backup(self) -> Backup:
        """The run's backup (:mod:`overlay.rebase.backup`): as :meth:`start` wrote it,
        else as :meth:`load` found it, else read now (empty when there is none)."""
        if self._backup is None:
            self._backup = read_backup(self.dir) or Backup({}, 0.0, "")
        return self._backup

    def _backup_patch(self, name: str, *, header_only: bool = False) -> Patch:
        """The patch as it was when the run started (parsed once per process; the diff
        only when asked for).

        Raises:
            FileNotFoundError: the backup holds no copy of it.
            PatchFormatError: the copy does not parse.
        """
        cache = self._patches
        if name not in cache or (not header_only and cache[name].changes == ()):
            backup = self.backup()
            rel = f"{layout.PATCH_DIR}/{name}"
            if rel not in backup.copies:
                raise FileNotFoundError(f"{backup.where} holds no copy of {rel}")
            cache[name] = parse_patch(
                backup.copies[rel][0],
                name,
                f"{backup.where}:{rel}",
                header_only=header_only,
            )
        return cache[name]

    def _old_layers(self) -> Layers | None:
        """The layers at the old bases with each patch's tree (computed once per process:
        the merges and the range-diff both need them); ``None`` when they cannot be
        computed."""
        if not self._old_done:
            old = self.state.old
            # Not the workspace's layers: the backed-up records at the old bases (a
            # merge base the workspace's layers cannot override), kept by the run.
            try:
                self._old = compute_layers(
                    self.store,
                    self._manifest(),
                    self.root,
                    pin=old.pin,
                    fork=old.fork,
                    merge_base=old.merge_base,
                    patches=[self._backup_patch(e.name) for e in self.state.patches],
                    resolutions=self.backup().resolutions(),
                    stepwise=True,
                )
            except OverlayError:
                self._old = None
            self._old_done = True
        return self._old
