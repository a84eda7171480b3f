"""Rebase and sync: carry the overlay onto a new MLX pin or fork commit (issue 6).

A run recomputes the layers on the new bases:

1. the fork delta onto the new pin. Each conflicted path is settled, in order, by
   carrying its existing resolution (``git merge-file`` of the old resolution, the
   old auto-merge and the new auto-merge), by a resolution recorded in an earlier
   run for the very same conflict (rerere-like, ``.overlay/rr-cache``), or by
   stopping for the user;
2. each patch of the series, by the engine (:func:`overlay.engine.carry_patch`):
   applied exactly when its recorded pre-images are unchanged below it, else
   cherry-picked by merge-ort from the tree it was made on (the old layer, so
   upstream renames are followed); "already upstream" only when that cherry-pick
   is empty; a conflict stops for the user with diff3 work files.

A stop writes the conflicted files with labelled markers into
``.overlay/rebase/work/`` and says what to do; ``--continue`` takes the edit,
``--drop`` drops the current patch (``--skip`` too, where the patch changes nothing
on the new base; elsewhere it asks for ``--drop``), ``--abort`` restores every file exactly as
it was. Nothing in ``patches-rocm/`` or ``LOCAL_FIXES.md`` changes until the
whole run completes; then the manifest (every byte but the three commits kept), the
resolutions, the refreshed patches (only those whose bytes changed), the
series and the two pins named in ``LOCAL_FIXES.md`` are written, and a report
goes to ``.overlay/last-rebase.md``. Every state change is saved before the
next step, so a run killed at any point resumes with ``--continue`` or
rolls back with ``--abort``. The state directory appears and disappears whole
(built beside its place and renamed, renamed away before it is removed), so a
kill never leaves half of it; a state found in part anyway is *wedged*
(:func:`overlay.runstate.inspect_state`) and ``--abort`` recovers it
(:meth:`Rebase.recover_wedged`). The CLI holds :func:`overlay.runstate.state_lock`
around every command that reads or writes the state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from typing import Any

from overlay import fixes
from overlay.engine import (
    CarryError,
    PatchApplyError,
    apply_series,
    carry_patch,
    exact_prefix,
    upstream_commit,
)
from overlay.errors import EXIT_FINDINGS, GitError, OverlayError
from overlay.fsutil import atomic_write, kill_point, scratch_dir
from overlay.gitstore import Store
from overlay.layers import changes_outside_conflicts, merge_fork_delta, read_resolutions
from overlay.manifest import MANIFEST_PATH, Manifest, load_manifest, set_pins
from overlay.markers import marker_lines
from overlay.patchfmt import tree_diff
from overlay.paths import check_path
from overlay.refresh import refreshed_bytes
from overlay.runstate import (
    NEW_STATE_DIR,
    OLD_STATE_DIR,
    REPORT_JSON,
    REPORT_MD,
    RR_CACHE,
    STATE_DIR,
    StateOnDisk,
    inspect_state,
    interrupts_deferred,
    wedged_hint,
)
from overlay.series import (
    PATCH_DIR,
    SERIES_PATH,
    Patch,
    parse_patch,
    read_series,
    split_patch,
)

RESOLVED = "patches-rocm/resolved"


class RebaseStopped(OverlayError):
    """The run stopped at a conflict and waits for the user (exit 1)."""

    exit_code = EXIT_FINDINGS


_checkpoint = (
    kill_point  # test hook: OVERLAY_TEST_KILL_AT=<name> SIGKILLs the process there
)


@dataclasses.dataclass
class Bases:
    """The three commits a layer stack is built from."""

    pin: str
    fork: str
    merge_base: str


def _tracked_files(root: str) -> list[str]:
    """The overlay files a run may change (relative paths): manifest, series, patches,
    resolutions, LOCAL_FIXES.md."""
    out = [MANIFEST_PATH, SERIES_PATH, fixes.FILE_NAME]
    pdir = os.path.join(root, PATCH_DIR)
    if os.path.isdir(pdir):
        out += [
            f"{PATCH_DIR}/{fn}"
            for fn in sorted(os.listdir(pdir))
            if fn.endswith(".patch")
        ]
    for rel in read_resolutions(root):
        out.append(f"{RESOLVED}/{rel}")
    return [p for p in out if os.path.isfile(os.path.join(root, p))]


class Rebase:
    """A rebase or sync in progress, persisted under ``.overlay/rebase/``.

    Args:
        root: overlay repository.
        store: git store.
    """

    def __init__(self, root: str, store: Store):
        self.root = os.path.abspath(root)
        self.store = store
        self.dir = os.path.join(self.root, STATE_DIR)
        self.work = os.path.join(self.dir, "work")
        self.state: dict[str, Any] = {}
        self._cat: Any = None

    # -- state ----------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """True when a run is in progress, or its state is wedged (see :meth:`inspect`)."""
        return self.inspect().present

    def inspect(self) -> StateOnDisk:
        """What the state directory holds (:func:`overlay.runstate.inspect_state`)."""
        return inspect_state(self.root)

    def load(self) -> None:
        """Read the saved state.

        Raises:
            OverlayError: no run in progress, or its state is wedged (then the
            message says why and the hint that ``--abort`` recovers it; exit 2).
        """
        info = self.inspect()
        if not info.present:
            raise OverlayError(
                "no rebase or sync in progress",
                hint="start one with `overlay rebase --onto SHA`",
            )
        if info.problem or info.state is None:
            raise OverlayError(
                f"the {info.kind} state is wedged: {info.problem}; it cannot be continued",
                hint=wedged_hint(info.kind),
            )
        self.state = info.state

    def save(self) -> None:
        """Write the state atomically.

        Raises:
            OverlayError: the state directory is gone (exit 2). It is never made
            again here: a state without its backup is what a second command
            removing the directory under a first one used to leave.
        """
        if not os.path.isdir(self.dir):
            raise OverlayError(
                f"{STATE_DIR} vanished while the {self.state.get('kind', 'rebase')} ran; "
                "the state is not written again without its backup",
                hint="check `git status`; restore the records with git if they changed",
            )
        # Rename-atomic, not fsynced: a killed process leaves the old or the new state,
        # never a torn one; a power loss may cost the last step, which is redone.
        atomic_write(
            os.path.join(self.dir, "state.json"),
            json.dumps(self.state, indent=1, sort_keys=True).encode(),
            durable=False,
        )

    def _discard_dir(self) -> None:
        """Remove the state directory as one step: renamed away first, so a kill
        during the removal leaves no half state (the sweep removes the rest)."""
        old = os.path.join(self.root, OLD_STATE_DIR)
        if os.path.lexists(old):
            shutil.rmtree(old, ignore_errors=True)
        os.rename(self.dir, old)
        shutil.rmtree(old, ignore_errors=True)

    # -- start ----------------------------------------------------------------------
    def start(self, kind: str, new: Bases, old: Bases) -> None:
        """Begin a run: back up every file it may change and save the plan.

        Args:
            kind: ``"rebase"`` (new pin) or ``"sync"`` (new fork commit).
            new, old: the bases after and before.
        Raises:
            OverlayError: a run is already in progress (exit 2).
        """
        info = self.inspect()
        if info.present:
            raise OverlayError(
                f"a {info.kind} is already in progress",
                hint="finish it with --continue / --skip, or --abort it",
            )
        # Built beside its place and renamed into it: the state directory appears
        # whole (backup and state.json) or not at all, whenever the process dies.
        new_dir = os.path.join(self.root, NEW_STATE_DIR)
        if os.path.lexists(new_dir):
            shutil.rmtree(new_dir)
        backup = os.path.join(new_dir, "backup")
        os.makedirs(backup)
        files = _tracked_files(self.root)
        for rel in files:
            dst = os.path.join(backup, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(self.root, rel), dst)
        self.state = {
            "format": 1,
            "kind": kind,
            "old": dataclasses.asdict(old),
            "new": dataclasses.asdict(new),
            "backup": files,
            "resolutions": {},
            "forked": None,
            "patches": [],
            "stop": None,
            "committing": False,
        }
        atomic_write(
            os.path.join(new_dir, "state.json"),
            json.dumps(self.state, indent=1, sort_keys=True).encode(),
            durable=False,
        )
        _checkpoint("start")
        if os.path.isdir(self.dir):
            shutil.rmtree(self.dir)  # an empty leftover (inspect found nothing in it)
        os.rename(new_dir, self.dir)

    # -- helpers ----------------------------------------------------------------------
    def _blob(self, oid: str) -> bytes:
        if self._cat is None:
            self._cat = self.store.cat_file()
        return self._cat.read(oid)[1]

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
    ) -> tuple[bytes, bool]:
        """``git merge-file -p`` on three texts (``--diff3`` adds the base section);
        returns ``(result, clean)``."""
        with scratch_dir("merge") as tmp:
            paths = []
            for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
                path = os.path.join(tmp, name)
                with open(path, "wb") as fh:
                    fh.write(data)
                paths.append(path)
            proc = self.store.git(
                "merge-file",
                "-p",
                *(["--diff3"] if diff3 else []),
                "-L",
                labels[0],
                "-L",
                labels[1],
                "-L",
                labels[2],
                *paths,
                check=False,
            )
        if proc.returncode < 0 or proc.returncode > 127:
            raise GitError(f"git merge-file failed: {proc.stderr.decode().strip()}")
        return proc.stdout, proc.returncode == 0

    def _stage_text(self, stages: dict, n: int) -> bytes:
        entry = stages.get(str(n)) or stages.get(n)
        return self._blob(entry[1]) if entry else b""

    def _labelled(self, stages: dict, bases: Bases | None) -> bytes:
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
        text, _ = self._merge_file(
            self._stage_text(stages, 2),
            self._stage_text(stages, 1),
            self._stage_text(stages, 3),
            labels,
            diff3=bases is not None,
        )
        return text

    @staticmethod
    def _conflict_key(text: bytes) -> str:
        """rerere-like identity of a conflict: the whole conflicted text with the marker
        labels stripped (the resolution is a whole file, so everything must match)."""
        normalized = re.sub(rb"(?m)^(<{7}|>{7}|\|{7}) .*$", rb"\1", text)
        return hashlib.sha256(normalized).hexdigest()

    def _rr_get(self, key: str) -> bytes | None:
        path = os.path.join(self.root, RR_CACHE, key)
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def _rr_put(self, key: str, data: bytes, path: str) -> None:
        """Record a resolution for later runs; the run remembers it so ``--abort`` forgets it."""
        os.makedirs(os.path.join(self.root, RR_CACHE), exist_ok=True)
        atomic_write(os.path.join(self.root, RR_CACHE, key), data)
        atomic_write(
            os.path.join(self.root, RR_CACHE, key + ".path"),
            path.encode("utf-8", "surrogateescape"),
        )
        self.state.setdefault("rr_recorded", []).append(key)

    def _write_work(self, files: dict[str, bytes | None]) -> list[str]:
        if os.path.isdir(self.work):
            shutil.rmtree(self.work)
        written = []
        for rel, data in files.items():
            full = os.path.join(self.work, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            if data is not None:
                atomic_write(full, data)
                written.append(rel)
        return written

    def _manifest(self) -> Manifest:
        return load_manifest(self.root)

    # -- the run ------------------------------------------------------------------------
    def run(self) -> dict:
        """Advance until the run completes or stops.

        Returns:
            The report (see :meth:`report`) when the run completed.
        Raises:
            RebaseStopped: a conflict waits for the user (exit 1); the message says
            which files to edit and what to run next.
        """
        manifest = self._manifest()
        new = Bases(**self.state["new"])
        old = Bases(**self.state["old"])
        try:
            if not self.state["committing"]:
                if self.state["forked"] is None:
                    self._settle_fork_delta(manifest, old, new)
                self._apply_patches()
            with (
                interrupts_deferred()
            ):  # the records are written whole, or (killed) --continue ends it
                if not self.state["committing"]:
                    self.state["committing"] = True
                    self.save()
                return self._commit(manifest, old, new)
        finally:
            self.close()

    def _settle_fork_delta(self, manifest: Manifest, old: Bases, new: Bases) -> None:
        store = self.store
        merge = merge_fork_delta(
            store, new.merge_base, new.pin, new.fork, manifest.carry
        )
        old_res = read_resolutions(self.root)
        old_merge = None
        decided: dict = self.state["resolutions"]
        for path in sorted(merge.stages):
            if path in decided:
                continue
            stages = {str(k): v for k, v in merge.stages[path].items()}
            new_auto = self._labelled(stages, None)
            if path in old_res:
                if old_merge is None:
                    old_merge = merge_fork_delta(
                        store, old.merge_base, old.pin, old.fork, manifest.carry
                    )
                old_stages = {
                    str(k): v for k, v in old_merge.stages.get(path, {}).items()
                }
                if old_stages:
                    old_auto = self._labelled(old_stages, None)
                    if old_auto == new_auto:
                        decided[path] = {
                            "status": "unchanged",
                            "blob": store.hash_blob(old_res[path]),
                            "note": "same conflict as before: the recorded resolution applies as is",
                        }
                        self.save()
                        continue
                    carried, clean = self._merge_file(
                        old_res[path],
                        old_auto,
                        new_auto,
                        ("recorded resolution", "old auto-merge", "new auto-merge"),
                    )
                    if clean and not marker_lines(carried):
                        decided[path] = {
                            "status": "carried",
                            "blob": store.hash_blob(carried),
                            "note": "recorded resolution carried by a 3-way merge"
                            + self._outside_note(merge, path, carried),
                        }
                        self.save()
                        continue
            key = self._conflict_key(new_auto)
            recorded = self._rr_get(key)
            if recorded is not None:
                decided[path] = {
                    "status": "reused",
                    "blob": store.hash_blob(recorded),
                    "note": f"resolution recorded for the same conflict in an earlier run (rr-cache "
                    f"{key[:12]}): review it; `overlay rebase --forget {path}` forgets it"
                    + self._outside_note(merge, path, recorded),
                }
                self.save()
                continue
            work = {path: self._labelled(stages, new)}
            previous = ""
            if path in old_res:
                # The recorded resolution did not carry over cleanly: put it beside the file.
                work[path + ".recorded"] = old_res[path]
                previous = (
                    f" The recorded resolution {RESOLVED}/{path} no longer merges cleanly; it is "
                    f"beside the file as {os.path.join(STATE_DIR, 'work', path)}.recorded for reference."
                )
            self._write_work(work)
            self.state["stop"] = {
                "type": "resolution",
                "path": path,
                "key": self._conflict_key(new_auto),
                "mode": (merge.stages[path].get(2) or merge.stages[path].get(3))[0],
                "recorded": path in old_res,
            }
            self.save()
            raise RebaseStopped(
                f"{path}: the fork delta conflicts with pin {new.pin[:8]}; edit "
                f"{os.path.join(STATE_DIR, 'work', path)} (markers labelled pin / merge base / fork), "
                f"then run `overlay {self.state['kind']} --continue` (or `--abort`).{previous}"
            )
        changes = {}
        for path, entry in decided.items():
            if path in merge.stages:
                mode = (
                    merge.stages[path].get(2)
                    or merge.stages[path].get(3)
                    or ("100644",)
                )[0]
                changes[path] = (mode, entry["blob"])
        forked = store.edit_tree(merge.tree, changes)
        self.state["forked"] = forked
        self.state["stale"] = sorted(p for p in old_res if p not in merge.stages)
        self._remember_stale(manifest, old, old_res, old_merge)
        self.state["merge_stats"] = {
            "carried": len(merge.carried),
            "conflicts": len(merge.stages),
        }
        self.state["patches"] = [
            {"name": name, "status": "pending"}
            for name, _line in read_series(self.root)
        ]
        self.save()

    def _remember_stale(
        self, manifest: Manifest, old: Bases, old_res: dict[str, bytes], old_merge
    ) -> None:
        """Record each resolution this run removes in the rr-cache, keyed on the conflict it
        resolved, as ``git rerere`` records every resolution it sees.

        A resolution goes when its path stops conflicting (e.g. a sync to an older fork);
        a later run that meets the very same conflict again (the sync back) then reuses
        it instead of stopping, so a round trip restores the records byte for byte.
        ``--abort`` forgets these entries with the rest of the run's.
        """
        stale = [p for p in self.state["stale"] if p in old_res]
        if not stale:
            return
        if old_merge is None:
            old_merge = merge_fork_delta(
                self.store, old.merge_base, old.pin, old.fork, manifest.carry
            )
        for path in stale:
            old_stages = {str(k): v for k, v in old_merge.stages.get(path, {}).items()}
            if not old_stages:
                continue  # the old layers did not conflict there either: nothing to key it on
            key = self._conflict_key(self._labelled(old_stages, None))
            if self._rr_get(key) is None:
                self._rr_put(key, old_res[path], path)
        self.save()

    def _current_tree(self) -> str:
        tree = self.state["forked"]
        for entry in self.state["patches"]:
            if entry["status"] in ("clean", "merged", "resolved"):
                tree = entry["tree"]
            elif entry["status"] == "pending":
                break
        return tree

    def _backup_patch(self, name: str, *, header_only: bool = False) -> Patch:
        """The patch as it was when the run started (parsed once per process; the diff
        only when asked for)."""
        cache = self.__dict__.setdefault("_patches", {})
        if name not in cache or (not header_only and cache[name].changes == ()):
            path = os.path.join(self.dir, "backup", PATCH_DIR, name)
            with open(path, "rb") as fh:
                cache[name] = parse_patch(
                    fh.read(), name, path, header_only=header_only
                )
        return cache[name]

    def _outside_note(self, merge, path: str, resolution: bytes) -> str:
        """ "; it changes N line(s) outside ..." when a resolution leaves git's merge outside
        the conflict regions (issue 12, item 7), else ""."""
        entry = self.store.entries(merge.tree, [path]).get(path)
        if entry is None or entry.kind != "blob":
            return ""
        outside = changes_outside_conflicts(self._blob(entry.oid), resolution)
        if not outside:
            return ""
        line, what = outside[0]
        return (
            f"; WARNING: it differs from git's merge outside the conflict regions in {len(outside)} place(s), "
            f"first at line {line} ({what}): upstream may be reverted there (verify reports LAY005)"
        )

    def _old_layers(self):
        """The layers at the old bases with each patch's tree (computed once per process:
        the merges and the range-diff both need them); ``None`` when they cannot be computed."""
        if "_old" not in self.__dict__:
            from overlay.layers import compute_layers

            old = Bases(**self.state["old"])
            try:
                self.__dict__["_old"] = compute_layers(
                    self.store,
                    self._manifest(),
                    os.path.join(self.dir, "backup"),
                    pin=old.pin,
                    fork=old.fork,
                    merge_base=old.merge_base,
                    patches=[
                        self._backup_patch(e["name"]) for e in self.state["patches"]
                    ],
                    stepwise=True,
                )
            except OverlayError:
                self.__dict__["_old"] = None
        return self.__dict__["_old"]

    def _made_on(self, name: str) -> tuple[str, str] | None:
        """The tree patch ``name`` was made on and the tree it produced, in the old layer
        (so merge-ort follows upstream's renames); ``None`` when the old layer cannot be
        computed (then the engine rebuilds them from the recorded blobs)."""
        layers = self._old_layers()
        if layers is None:
            return None
        before = layers.forked
        for result in layers.patches:
            if result.patch.name == name:
                assert result.tree is not None
                return before, result.tree
            before = result.tree
        return None

    def _apply_exact_run(self) -> None:
        """Apply the leading pending patches that sit on their recorded pre-images in one
        batch (one ``ls-tree``, then ``apply`` + ``write-tree`` each): they keep their bytes."""
        pending = [e for e in self.state["patches"] if e["status"] == "pending"]
        if not pending:
            return
        patches = [self._backup_patch(e["name"]) for e in pending]
        tree = self._current_tree()
        count = exact_prefix(self.store, tree, patches)
        if not count:
            return
        try:
            _tree, results = apply_series(
                self.store, tree, patches[:count], stepwise=True
            )
        except PatchApplyError:
            return  # the per-patch path below says which and why
        for entry, result in zip(pending, results):
            entry.update(status="clean", tree=result.tree, blob=None, changed=False)
        self.save()
        _checkpoint("patch")

    def _apply_patches(self) -> None:
        store = self.store
        old, new = Bases(**self.state["old"]), Bases(**self.state["new"])
        self._apply_exact_run()
        for entry in self.state["patches"]:
            if entry["status"] != "pending":
                continue
            patch = self._backup_patch(entry["name"])
            tree = self._current_tree()

            try:
                carried = carry_patch(
                    store,
                    patch,
                    tree,
                    made=lambda name=entry["name"]: self._made_on(name),
                )
            except CarryError as exc:
                self._stop(
                    patch,
                    {
                        "type": "patch",
                        "name": patch.name,
                        "tree": tree,
                        "merged": tree,
                        "files": [],
                        "modes": {},
                    },
                    f"patch {patch.name} does not apply to the new layer and cannot be merged: "
                    f"{exc.message}",
                    {},
                )
            if carried.status == "conflict":
                self._stop_on_patch(patch, tree, carried)
            if carried.status == "upstream":
                commit = upstream_commit(
                    store,
                    split_patch(patch.data)[1],
                    [(old.pin, new.pin), (old.fork, new.fork)],
                    sorted(patch.touched),
                )
                entry.update(
                    status="upstream",
                    note="already upstream: carrying it changes nothing"
                    + (f' (upstream {commit[:12]} "{commit[41:]}")' if commit else ""),
                )
            elif carried.status == "exact":
                # On its recorded pre-images: the diff, and so the file, keeps every byte.
                entry.update(
                    status="clean", tree=carried.tree, blob=None, changed=False
                )
            else:
                data = refreshed_bytes(patch.data, tree_diff(store, tree, carried.tree))
                moved = sorted(
                    p
                    for p in self._changed(tree, carried.tree)
                    if p not in patch.touched
                )
                note = (
                    f"followed a rename: now changes {', '.join(moved)}"
                    if moved
                    else ""
                )
                entry.update(
                    status="merged",
                    tree=carried.tree,
                    blob=store.hash_blob(data),
                    changed=data != patch.data,
                    note=note,
                )
            self.save()
            _checkpoint("patch")
            if carried.status != "exact":
                self._apply_exact_run()

    def _changed(self, old: str, new: str) -> set[str]:
        return {row[5] for row in self.store.diff_tree(old, new)}

    def _stop(
        self, patch: Patch, stop: dict, message: str, files: dict[str, bytes | None]
    ) -> None:
        """Save a stop on ``patch``, write its work files, raise :class:`RebaseStopped`."""
        self._write_work(files)
        entry = next(e for e in self.state["patches"] if e["name"] == patch.name)
        entry["status"] = "stopped"
        self.state["stop"] = stop
        self.save()
        raise RebaseStopped(message)

    def _stop_on_patch(self, patch: Patch, tree: str, carried) -> None:
        """Stop on a conflict of merge-ort: diff3 work files for each conflicted path."""
        merge = carried.merge
        files: dict[str, bytes | None] = {}
        what, edit, modes, gitlinks = [], [], {}, []
        labels = ("new base", "patch pre-image", f"patch {patch.name}")
        for path, st in sorted(merge.stages.items()):
            kinds = ", ".join(merge.conflict_types(path)) or "CONFLICT"
            if any(mode == "160000" for mode, _oid in st.values()):
                gitlinks.append(path)
                what.append(f"{path} ({kinds}: a submodule)")
                continue
            s1, s2, s3 = st.get(1), st.get(2), st.get(3)
            modes[path] = (s2 or s3 or s1)[0]
            edit.append(path)
            if s2 and s3:
                files[path], _ = self._merge_file(
                    self._blob(s2[1]),
                    self._blob(s1[1]) if s1 else b"",
                    self._blob(s3[1]),
                    labels,
                    diff3=True,
                )
                what.append(f"{path} ({kinds})")
            elif s3:
                files[path] = self._blob(s3[1])
                what.append(
                    f"{path} ({kinds}: gone from the new base, changed by the patch; the file holds the "
                    "patch's version: keep it to keep it, delete it to accept the deletion)"
                )
            else:
                files[path] = self._blob(s2[1])
                if s1:
                    files[path + ".pre-image"] = self._blob(s1[1])
                what.append(
                    f"{path} ({kinds}: the patch deletes it, the new base changed it; the file holds the "
                    f"new base's version and {path}.pre-image what the patch was made to delete: delete "
                    "the file to delete it, keep it to keep the new base's version)"
                )
        for paths, kind, text in merge.messages:
            if kind.startswith("CONFLICT") and not any(
                p in merge.stages for p in paths
            ):
                what.append(text)  # e.g. a directory that became a submodule
        fix = patch.local_fix
        stop = {
            "type": "patch",
            "name": patch.name,
            "tree": tree,
            "merged": carried.tree,
            "files": edit,
            "gitlinks": gitlinks,
            "modes": modes,
        }
        work = os.path.join(STATE_DIR, "work")
        self._stop(
            patch,
            stop,
            f"patch {patch.name} conflicts with the new base: {'; '.join(what) or 'see git merge-tree'}. "
            f"Edit the files under {work} (markers labelled new base / patch pre-image / patch "
            f"{patch.name}; delete a file there to delete it), then `overlay {self.state['kind']} --continue`;"
            f" or `--drop` to leave the patch out of the series (its file and series line go"
            + (f"; LOCAL_FIXES entry {fix} stays" if fix else "")
            + "), or `--abort` to restore everything",
            files,
        )

    # -- user actions --------------------------------------------------------------------
    def continue_(self) -> dict:
        """Take the user's edit for the current stop and go on (see :meth:`run`).

        Raises:
            RebaseStopped: markers remain (exit 1, naming path and line), the edit
            leaves the patch empty (then ``--skip`` is the explicit way to drop it), or
            the next conflict stops the run.
            OverlayError: the edit would put a file where the new base has a submodule.
        """
        stop = self.state.get("stop")
        if stop:
            if stop["type"] == "empty":
                raise RebaseStopped(self._empty_message(stop["name"]))
            paths = [stop["path"]] if stop["type"] == "resolution" else stop["files"]
            for rel in paths:
                full = os.path.join(self.work, rel)
                if os.path.isfile(full):
                    with open(full, "rb") as fh:
                        found = marker_lines(fh.read())
                    if found:
                        raise RebaseStopped(
                            f"{os.path.join(STATE_DIR, 'work', rel)}:{found[0][0]}: conflict marker "
                            "left; finish the edit, then --continue again"
                        )
            if stop["type"] == "resolution":
                with open(os.path.join(self.work, stop["path"]), "rb") as fh:
                    data = fh.read()
                self._rr_put(stop["key"], data, stop["path"])
                self.state["resolutions"][stop["path"]] = {
                    "status": "resolved",
                    "blob": self.store.hash_blob(data),
                    "note": "conflict resolved by hand",
                }
            else:
                self._take_patch_edit(stop)
            self.state["stop"] = None
            self.save()
            shutil.rmtree(self.work, ignore_errors=True)
        return self.run()

    def _empty_message(self, name: str) -> str:
        fix = self._backup_patch(name, header_only=True).local_fix
        return (
            f"the resolved patch {name} changes nothing on the new base. It is not dropped without your word: "
            f"`overlay {self.state['kind']} --drop` (or `--skip`) leaves it out of the series (its file and series line go"
            + (
                f"; LOCAL_FIXES entry {fix} stays for you to move or delete"
                if fix
                else ""
            )
            + "), `--abort` restores everything as before the run"
        )

    def _take_patch_edit(self, stop: dict) -> None:
        store = self.store
        base = stop["tree"]
        conflicted = set(stop["files"]) | set(stop.get("gitlinks", []))
        # What merge-ort merged cleanly, then the user's files for the conflicted paths.
        changes: dict[str, tuple[str, str] | None] = {}
        for old_mode, new_mode, _oo, new_oid, status, path in store.diff_tree(
            base, stop["merged"]
        ):
            if path in conflicted or "160000" in (old_mode, new_mode):
                # A submodule stays as the new base has it: merge-ort may have moved it
                # aside (``path~<commit>``) to make room for the patch's directory.
                continue
            changes[path] = None if status == "D" else (new_mode, new_oid)
        for rel in stop["files"]:
            full = os.path.join(self.work, rel)
            if os.path.isfile(full):
                with open(full, "rb") as fh:
                    changes[rel] = (
                        stop["modes"].get(rel, "100644"),
                        store.hash_blob(fh.read()),
                    )
            else:
                changes[rel] = None
        # Never let a file replace what the new base has above it (a directory that became
        # a submodule, shared case 13): update-index would silently drop the gitlink.
        prefixes = sorted(
            {
                p.rsplit("/", i)[0]
                for p, e in changes.items()
                if e is not None
                for i in range(1, p.count("/") + 1)
            }
        )
        for prefix, entry in store.entries(base, prefixes).items():
            if entry.kind != "tree":
                placed = sorted(
                    p
                    for p, e in changes.items()
                    if e is not None and p.startswith(prefix + "/")
                )
                raise OverlayError(
                    f"{placed[0]}: the new base has {'a submodule' if entry.kind == 'commit' else 'a file'}"
                    f" at {prefix}, so the patch's file cannot go there",
                    hint=f"delete {os.path.join(STATE_DIR, 'work', placed[0])} and --continue (the "
                    "patch then leaves it alone), or --skip the patch, or --abort",
                )
        new_tree = store.edit_tree(base, changes)
        entry = next(e for e in self.state["patches"] if e["name"] == stop["name"])
        patch = self._backup_patch(stop["name"])
        if new_tree == base:
            # Empty after the edit: never dropped silently (issue 12, item 4).
            self.state["stop"] = {"type": "empty", "name": stop["name"]}
            self.save()
            shutil.rmtree(self.work, ignore_errors=True)
            raise RebaseStopped(self._empty_message(stop["name"]))
        data = refreshed_bytes(patch.data, tree_diff(store, base, new_tree))
        entry.update(
            status="resolved",
            tree=new_tree,
            blob=store.hash_blob(data),
            changed=data != patch.data,
        )

    def skip(self, *, drop: bool = False) -> dict:
        """Drop the patch the run stopped on and go on: its file and series line go when
        the run completes; its LOCAL_FIXES entry stays (the report says so).

        A patch that changes nothing on the new base (the "empty" stop, which already
        asked) goes with ``--skip`` or ``--drop``. A patch stopped on a conflict still
        carries a change the new base lacks: ``--skip`` asks for ``--drop`` instead of
        deleting it, as an emptied patch is never dropped without the word (issue 17,
        stumble 6: a ``--skip`` on the last stop completed the run and deleted the file).

        Args:
            drop: the explicit word (``--drop``).
        Raises:
            OverlayError: the run did not stop on a patch (exit 2).
            RebaseStopped: ``--skip`` on a conflict stop; nothing changed, the run
                stays stopped (exit 1).
        """
        stop = self.state.get("stop")
        word = "--drop" if drop else "--skip"
        if not stop or stop["type"] not in ("patch", "empty"):
            raise OverlayError(
                f"{word} drops a patch; the run is not stopped on one",
                hint="a conflicting fork path needs a resolution: edit it and --continue",
            )
        entry = next(e for e in self.state["patches"] if e["name"] == stop["name"])
        fix = self._backup_patch(stop["name"], header_only=True).local_fix
        if stop["type"] == "patch" and not drop:
            kind = self.state["kind"]
            raise RebaseStopped(
                f"--skip would delete {PATCH_DIR}/{stop['name']} and its series line when the run completes"
                + (f" (LOCAL_FIXES entry {fix} stays)" if fix else "")
                + ", and its change is not on the new base. It is not dropped without your word: "
                f"`overlay {kind} --drop` drops it; edit the work files and `--continue` to keep it; "
                f"`--abort` restores everything"
            )
        entry.update(
            status="skipped",
            note=f"dropped by {word}; move or delete LOCAL_FIXES entry {fix}"
            if fix
            else f"dropped by {word}",
        )
        self.state["stop"] = None
        self.save()
        shutil.rmtree(self.work, ignore_errors=True)
        return self.run()

    def abort(self) -> list[str]:
        """Restore every file the run may have changed, byte for byte, and forget the run,
        including the resolutions it recorded in the rr-cache (shared case 17).

        Returns:
            Relative paths restored or removed.
        """
        with (
            interrupts_deferred()
        ):  # restored whole: "as it was before the run" must be true
            return self._abort()

    def _abort(self) -> list[str]:
        backup = os.path.join(self.dir, "backup")
        touched = []
        saved = set(self.state.get("backup", []))
        for rel in _tracked_files(self.root):
            if rel not in saved:
                os.unlink(os.path.join(self.root, rel))
                touched.append(rel)
        for rel in sorted(saved):
            src = os.path.join(backup, rel)
            dst = os.path.join(self.root, rel)
            with open(src, "rb") as fh:
                data = fh.read()
            try:
                with open(dst, "rb") as fh:
                    same = fh.read() == data
            except FileNotFoundError:
                same = False
            if not same:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                atomic_write(dst, data, mode=os.stat(src).st_mode & 0o7777)
                touched.append(rel)
        _prune_empty(os.path.join(self.root, RESOLVED))
        for key in self.state.get("rr_recorded", []):
            _rr_remove(self.root, key)
        self._discard_dir()
        return sorted(touched)

    def recover_wedged(self) -> Recovery:
        """``--abort`` on a wedged state: restore the records from what is left, remove the state.

        What is restored depends on what is there (:func:`overlay.runstate.inspect_state`):

        * a valid ``state.json`` whose backup is gone or short: every file with a
          copy in the backup is restored; a file the run created (a tracked file
          not in the state's backup list) is removed; a file without a copy is
          kept as it is and named;
        * a backup without a valid ``state.json``: the copies that differ are
          restored, unless a run completed after the backup was made (its report
          is newer), which makes the backup a leftover of that run: then nothing
          is restored. Nothing is removed (without the state nobody knows which
          files the run created).

        Returns:
            :class:`Recovery`.
        Raises:
            OverlayError: the state is not wedged (use :meth:`abort`), or there is none.
        """
        info = self.inspect()
        if not info.present or not info.problem:
            raise OverlayError("the rebase state is not wedged")
        backup = os.path.join(self.dir, "backup")
        copies = _files_under(backup)
        restored: list[str] = []
        kept: list[str] = []
        note = ""
        if info.state is not None:
            saved = set(info.state["backup"])
            if info.state.get("commit_started"):
                for rel in _tracked_files(self.root):
                    if rel not in saved:
                        os.unlink(os.path.join(self.root, rel))
                        restored.append(rel)
            else:
                note = "the run had not begun writing the records, so they are as they were before it"
            for rel in sorted(saved):
                if rel in copies:
                    if _restore(backup, self.root, rel):
                        restored.append(rel)
                elif info.state.get("commit_started"):
                    kept.append(rel)
            for key in (
                info.state.get("rr_recorded", [])
                if isinstance(info.state.get("rr_recorded"), list)
                else []
            ):
                if isinstance(key, str) and re.fullmatch(r"[0-9a-f]{64}", key):
                    _rr_remove(self.root, key)
        elif copies:
            try:
                completed_after = os.path.getmtime(
                    os.path.join(self.root, REPORT_JSON)
                ) > os.path.getmtime(backup)
            except OSError:
                completed_after = False
            if completed_after:
                note = (
                    "a run completed after this backup was made (.overlay/last-rebase.json is newer): "
                    "the backup is its leftover, and nothing was restored from it"
                )
            else:
                for rel in sorted(copies):
                    if _restore(backup, self.root, rel):
                        restored.append(rel)
                note = (
                    "without state.json the files the run may have created are not known: "
                    "check `git status` for new files under patches-rocm/"
                )
        _prune_empty(os.path.join(self.root, RESOLVED))
        self._discard_dir()
        return Recovery(info.kind, info.problem, sorted(restored), kept, note)

    # -- completion ---------------------------------------------------------------------
    def _commit(self, manifest: Manifest, old: Bases, new: Bases) -> dict:
        root = self.root
        if not self.state.get("commit_started"):
            # Never overwrite what the user edited while the run was stopped.
            backup = os.path.join(self.dir, "backup")
            edited = []
            for rel in self.state["backup"]:
                try:
                    with (
                        open(os.path.join(root, rel), "rb") as a,
                        open(os.path.join(backup, rel), "rb") as b,
                    ):
                        if a.read() != b.read():
                            edited.append(rel)
                except FileNotFoundError:
                    edited.append(rel)
            if edited:
                raise OverlayError(
                    f"changed since the {self.state['kind']} started: {', '.join(edited)}",
                    hint="move your edits aside and run --continue again (or --abort)",
                )
            self.state["commit_started"] = True
            self.save()
        # 1. manifest, comments preserved
        mpath = os.path.join(root, MANIFEST_PATH)
        with open(mpath, encoding="utf-8") as fh:
            text = fh.read()
        updated = set_pins(text, new.pin, new.fork, new.merge_base)
        if updated is None:  # not the plain form: tomlkit keeps the rest of it
            import tomlkit

            doc = tomlkit.parse(text)
            doc["upstream"]["pin"] = new.pin
            doc["fork"]["commit"] = new.fork
            doc["fork"]["merge-base"] = new.merge_base
            updated = tomlkit.dumps(doc)
        _write_if_changed(mpath, updated.encode())
        _checkpoint("commit")
        # 2. resolutions: exactly the decided set
        wanted = {p: e["blob"] for p, e in self.state["resolutions"].items()}
        for rel in list(read_resolutions(root)):
            if rel not in wanted:
                os.unlink(os.path.join(root, RESOLVED, rel))
        for rel, oid in wanted.items():
            full = os.path.join(root, RESOLVED, rel)
            data = self._blob(oid)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            _write_if_changed(full, data)
        _prune_empty(os.path.join(root, RESOLVED))
        # 3. patches and series
        kept = []
        for entry in self.state["patches"]:
            full = os.path.join(root, PATCH_DIR, entry["name"])
            if entry["status"] in ("upstream", "skipped"):
                if os.path.exists(full):
                    os.unlink(full)
                continue
            kept.append(entry["name"])
            if entry.get("blob") is None:
                continue  # applied exactly: the file keeps its bytes
            data = self._blob(entry["blob"])
            _write_if_changed(full, data)
        series_path = os.path.join(root, SERIES_PATH)
        with open(series_path, "rb") as fh:
            old_series = fh.read().decode()
        new_series = "".join(
            ln + "\n"
            for ln in old_series.splitlines()
            if ln.split("#", 1)[0].strip() in kept or not ln.split("#", 1)[0].strip()
        )
        if new_series != old_series:
            atomic_write(series_path, new_series.encode())
        # 4. the pins named in LOCAL_FIXES.md
        lf = os.path.join(root, fixes.FILE_NAME)
        if os.path.isfile(lf):
            with open(lf, "rb") as fh:
                text = fh.read()
            # Bytes, so a BOM and CRLF line ends survive; the title may follow a BOM.
            updated = re.sub(
                rb"^((?:\xef\xbb\xbf)?# Local changes relative to \S+@)[0-9a-fA-F]{8}",
                lambda m: m.group(1) + new.fork[:8].encode(),
                text,
                count=1,
                flags=re.M,
            )
            updated = re.sub(
                rb"^(## Retarget onto the MLX pin \()[0-9a-fA-F]{8}\)",
                lambda m: m.group(1) + new.pin[:8].encode() + b")",
                updated,
                count=1,
                flags=re.M,
            )
            if updated != text:
                atomic_write(lf, updated)
        report = self.report(old, new)
        os.makedirs(os.path.join(root, ".overlay"), exist_ok=True)
        from overlay.rebase_report import render_markdown

        atomic_write(os.path.join(root, REPORT_MD), render_markdown(report).encode())
        atomic_write(
            os.path.join(root, REPORT_JSON), json.dumps(report, indent=2).encode()
        )
        self._discard_dir()
        return report

    def report(self, old: Bases, new: Bases) -> dict:
        """The run's outcome as plain data (see :mod:`overlay.rebase_report`)."""
        resolutions = [
            {"path": p, "status": e["status"], "note": e.get("note", "")}
            for p, e in sorted(self.state["resolutions"].items())
        ]
        resolutions += [
            {
                "path": p,
                "status": "removed",
                "note": "the path no longer conflicts; the resolution stays in the rr-cache, and a "
                "later run that meets the same conflict reuses it",
            }
            for p in self.state.get("stale", [])
        ]
        patches = []
        for entry in self.state["patches"]:
            patch = self._backup_patch(entry["name"], header_only=True)
            status = entry["status"]
            if status == "merged" and not entry.get("changed"):
                status = "merged (bytes unchanged)"
            patches.append(
                {
                    "name": entry["name"],
                    "status": status,
                    "local_fix": patch.local_fix,
                    "note": entry.get("note", ""),
                }
            )
        return {
            "kind": self.state["kind"],
            "pins": {
                "before": dataclasses.asdict(old),
                "after": dataclasses.asdict(new),
            },
            "merge": self.state.get("merge_stats", {}),
            "resolutions": resolutions,
            "patches": patches,
            "range_diff": self._range_diff(),
            "next_steps": self._next_steps(resolutions),
        }

    @staticmethod
    def _next_steps(resolutions: list[dict]) -> list[str]:
        steps = []
        changed = [
            r["path"]
            for r in resolutions
            if r["status"] not in ("unchanged", "removed")
        ]
        removed = [r["path"] for r in resolutions if r["status"] == "removed"]
        if changed:
            steps.append(
                "review the retarget entries of LOCAL_FIXES.md for "
                + ", ".join(changed)
                + " (new resolutions need an entry: overlay fix new --section retarget ...)"
            )
        if removed:
            steps.append(
                "update or drop the LOCAL_FIXES.md entries that name the removed resolution(s) "
                + ", ".join(f"patches-rocm/resolved/{p}" for p in removed)
            )
        return steps + [
            "overlay verify",
            "overlay build --backend rocm",
            "overlay suite run",
        ]

    def _range_diff(self) -> str:
        """``git range-diff`` of the old series (on the old layer) against the new one.

        When every patch applied exactly and keeps its bytes there is nothing to
        compare: the range-diff would pair each patch with itself (``=``), so it is
        summarized without running git.
        """
        from overlay.rebase_report import label_range_diff, patch_label

        entries = self.state["patches"]
        labels = {
            e["name"]: patch_label(
                e["name"], self._backup_patch(e["name"], header_only=True).local_fix
            )
            for e in entries
        }
        if all(e["status"] == "clean" and not e.get("changed") for e in entries):
            return "".join(
                f"{labels[e['name']]} = {labels[e['name']]}\n" for e in entries
            )
        store = self.store
        layers = self._old_layers()
        if layers is None:
            return ""

        def chain(base_tree: str, trees: list[tuple[str, str]]) -> tuple[str, str]:
            specs = [(base_tree, [], "overlay: layer below the series")]
            specs += [(tree, [i], subject) for i, (subject, tree) in enumerate(trees)]
            shas = store.commit_chain(specs)
            return shas[0], shas[-1]

        old_base, old_tip = chain(
            layers.forked, [(r.patch.subject, r.tree) for r in layers.patches]
        )
        new_trees = [
            (self._backup_patch(e["name"], header_only=True).subject, e["tree"])
            for e in entries
            if e.get("tree") and e["status"] in ("clean", "merged", "resolved")
        ]
        new_base, new_tip = chain(self.state["forked"], new_trees)
        proc = store.git(
            "range-diff",
            "--no-color",
            f"{old_base}..{old_tip}",
            f"{new_base}..{new_tip}",
            check=False,
        )
        old_labels = [
            patch_label(r.patch.name, r.patch.local_fix) for r in layers.patches
        ]
        new_labels = [
            labels[e["name"]]
            for e in entries
            if e.get("tree") and e["status"] in ("clean", "merged", "resolved")
        ]
        return label_range_diff(
            proc.stdout.decode("utf-8", "replace"), old_labels, new_labels
        )


@dataclasses.dataclass
class Recovery:
    """What :meth:`Rebase.recover_wedged` did.

    Attributes:
        kind: ``"rebase"`` or ``"sync"``.
        problem: why the state was wedged.
        restored: files restored from the backup, or removed as created by the run.
        kept: files the run had begun writing that had no backup copy: left as they are.
        note: one more sentence for the user (``""`` when none).
    """

    kind: str
    problem: str
    restored: list[str]
    kept: list[str]
    note: str


def _files_under(top: str) -> set[str]:
    """Slash-separated paths of the regular files under ``top`` (symlinks not followed)."""
    out = set()
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                out.add(os.path.relpath(full, top).replace(os.sep, "/"))
    return out


def _restore(backup: str, root: str, rel: str) -> bool:
    """Copy ``backup/rel`` to ``root/rel`` unless it already holds those bytes; True when written."""
    check_path(rel, what="backed-up file")
    src = os.path.join(backup, *rel.split("/"))
    dst = os.path.join(root, *rel.split("/"))
    with open(src, "rb") as fh:
        data = fh.read()
    try:
        with open(dst, "rb") as fh:
            if fh.read() == data:
                return False
    except (FileNotFoundError, IsADirectoryError):
        pass
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    atomic_write(dst, data, mode=os.stat(src).st_mode & 0o7777)
    return True


def _rr_remove(root: str, key: str) -> None:
    for name in (key, key + ".path"):
        try:
            os.unlink(os.path.join(root, RR_CACHE, name))
        except FileNotFoundError:
            pass


def forget_resolution(root: str, path: str) -> int:
    """Forget every resolution recorded in the rr-cache for ``path`` (``rebase --forget``).

    Args:
        root: overlay repository.
        path: repository path of the conflicted file, e.g. ``mlx/fast_primitives.h``.
    Returns:
        How many recorded resolutions were removed.
    """
    cache = os.path.join(root, RR_CACHE)
    removed = 0
    for name in sorted(os.listdir(cache)) if os.path.isdir(cache) else []:
        if not name.endswith(".path"):
            continue
        with open(os.path.join(cache, name), "rb") as fh:
            if fh.read().decode("utf-8", "surrogateescape") != path:
                continue
        _rr_remove(root, name[: -len(".path")])
        removed += 1
    return removed


def _write_if_changed(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (temp + rename) unless it already holds exactly that."""
    try:
        with open(path, "rb") as fh:
            if fh.read() == data:
                return
    except FileNotFoundError:
        pass
    atomic_write(path, data)


def _prune_empty(top: str) -> None:
    if not os.path.isdir(top):
        return
    for dirpath, _dirnames, _filenames in sorted(
        os.walk(top, topdown=False), key=lambda t: -len(t[0])
    ):
        if not os.listdir(dirpath):
            os.rmdir(dirpath)
