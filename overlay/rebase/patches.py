"""Step 2 of a run: each patch of the series onto the new layer, and the user's edits.

Each patch goes through the engine (:func:`overlay.engine.carry_patch`): applied
exactly when its recorded pre-images are unchanged below it, else cherry-picked by
merge-ort from the tree it was made on (the old layer, so upstream renames are
followed); "already upstream" only when that cherry-pick is empty; a conflict
stops for the user with diff3 work files (:class:`~overlay.rebase.state.PatchStop`).
"""

from __future__ import annotations

import os
import re
from typing import NoReturn

from overlay import layout
from overlay.engine import (
    Carried,
    CarryError,
    PatchApplyError,
    apply_series,
    carry_patch,
    exact_prefix,
    upstream_commit,
)
from overlay.errors import OverlayError
from overlay.fs.atomic import remove_dir
from overlay.git.store import MergeResult, TreeEntry
from overlay.rebase.base import RebaseStopped, _checkpoint
from overlay.rebase.formatting import FormatSteps
from overlay.rebase.rerere import RerereSteps
from overlay.rebase.state import (
    EmptyStop,
    PatchOutcome,
    PatchStatus,
    PatchStop,
    Stop,
)
from overlay.records.patchfmt import tree_diff
from overlay.records.series import Patch, split_patch

#: Tree changes as :meth:`overlay.git.store.Store.edit_tree` takes them.
Changes = dict[str, tuple[str, str] | None]


class PatchSteps(RerereSteps, FormatSteps):
    """Carry the series onto the new layer; stop on a conflict; take the user's edit."""

    def _made_on(self, name: str) -> tuple[str, str] | None:
        """The tree patch ``name`` was made on and the tree it produced, in the old layer
        (so merge-ort follows upstream's renames); ``None`` when the old layer cannot be
        computed (then the engine rebuilds them from the recorded blobs)."""
        layers = self._old_layers()
        if layers is None:
            return None
        before = layers.forked
        for result in layers.patches:
            # compute_layers(stepwise=True) gives every patch its tree.
            assert result.tree is not None
            if result.patch.name == name:
                # An unverifiable patch's old tree is its text's, not its record's: the
                # carry must not rest on it (the engine's own rebuild says why not).
                return None if result.state == "unverified" else (before, result.tree)
            before = result.tree
        return None

    def _apply_exact_run(self) -> None:
        """Apply the leading pending patches that sit on their recorded pre-images in one
        batch (one ``ls-tree``, then ``apply`` + ``write-tree`` each): they keep their
        bytes."""
        pending = [e for e in self.state.patches if e.status == PatchStatus.PENDING]
        if not pending:
            return
        patches = [self._backup_patch(e.name) for e in pending]
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
        for entry, result in zip(pending, results, strict=False):
            assert result.tree is not None
            entry.carried("clean", result.tree, None, False)
        self.save()
        _checkpoint("patch")

    def _apply_patches(self) -> None:
        """Carry every pending patch, saving after each.

        Raises:
            RebaseStopped: a patch conflicts, or cannot be merged (exit 1).
        """
        self._apply_exact_run()
        for entry in self.state.patches:
            if entry.status != PatchStatus.PENDING:
                continue
            patch = self._backup_patch(entry.name)
            tree = self._current_tree()
            carried = self._carry(patch, tree)
            if carried.status == "conflict":
                self._replay_or_stop(entry, patch, tree, carried)
            else:
                self._record_carried(entry, patch, tree, carried)
            self.save()
            _checkpoint("patch")
            if carried.status != "exact":
                self._apply_exact_run()

    def _carry(self, patch: Patch, tree: str) -> Carried:
        """The engine's carry of ``patch`` onto ``tree``; a patch that cannot be merged
        at all stops the run (:class:`RebaseStopped`)."""
        try:
            return carry_patch(
                self.store,
                patch,
                tree,
                made=lambda: self._made_on(patch.name),
            )
        except CarryError as exc:
            self._stop(
                patch,
                PatchStop(name=patch.name, tree=tree, merged=tree, files=[], modes={}),
                f"patch {patch.name} does not apply to the new layer and cannot be "
                f"merged: {exc.message}" + (f"; {exc.hint}" if exc.hint else ""),
                {},
            )

    def _record_carried(
        self, entry: PatchOutcome, patch: Patch, tree: str, carried: Carried
    ) -> None:
        """Put a carried patch's outcome in its entry: upstream, exact (bytes kept) or
        merged (refreshed bytes, and the paths a followed rename moved it to)."""
        if carried.status == "upstream":
            entry.status = PatchStatus.UPSTREAM
            twin = self._same_change_before(patch, entry)
            if twin is not None:
                entry.note = (
                    f"carrying it changes nothing: {twin}, earlier in the series, "
                    "already makes the same change"
                )
                return
            old, new = self.state.old, self.state.new
            commit = upstream_commit(
                self.store,
                split_patch(patch.data)[1],
                [(old.pin, new.pin), (old.fork, new.fork)],
                sorted(patch.touched),
            )
            entry.note = "already upstream: carrying it changes nothing" + (
                f' (upstream {commit[:12]} "{commit[41:]}")' if commit else ""
            )
        elif carried.status == "exact":
            # On its recorded pre-images: the diff, and so the file, keeps every byte.
            entry.carried("clean", carried.tree, None, False)
        else:
            # the refresh (and difflib) load only for a patch merged, not carried exactly
            from overlay.engine.refresh import refreshed_bytes

            data = refreshed_bytes(
                patch.data, tree_diff(self.store, tree, carried.tree)
            )
            moved = sorted(
                p for p in self._changed(tree, carried.tree) if p not in patch.touched
            )
            entry.carried(
                "merged",
                carried.tree,
                self.store.hash_blob(data),
                data != patch.data,
                note=f"followed a rename: now changes {', '.join(moved)}"
                if moved
                else "",
            )

    def _replay_or_stop(
        self, entry: PatchOutcome, patch: Patch, tree: str, carried: Carried
    ) -> None:
        """A conflicted carry: land it with the recorded resolutions when every
        conflicted path has one (each named as it is replayed), else stop.

        Raises:
            RebaseStopped: a conflicted path has no recorded resolution, or the
                replayed resolutions leave the patch empty (exit 1).
        """
        merge = carried.merge
        assert merge is not None, "a conflict comes from a merge"
        keys = self._patch_conflict_keys(merge.stages)
        found = {
            path: hit
            for path, key in keys.items()
            if (hit := self._recorded_patch_resolution(key)) is not None
        }
        if not found or set(found) != set(merge.stages) or _other_conflicts(merge):
            self._stop_on_patch(patch, tree, carried, keys, found)
        said = [
            self._replay_line(path, patch.name, keys[path], where)
            for path, (_data, where) in sorted(found.items())
        ]
        for line in said:
            self.say(line)
        entry.status = (
            PatchStatus.STOPPED
        )  # until the replayed edit lands (an empty one stops)
        stop = PatchStop(
            name=patch.name,
            tree=tree,
            merged=carried.tree,
            files=sorted(found),
            modes={p: (merge.stages[p].get(2) or merge.stages[p][3])[0] for p in found},
        )
        self._take_patch_edit(stop, {path: data for path, (data, _w) in found.items()})
        entry.note = "; ".join(said)

    def _same_change_before(self, patch: Patch, entry: PatchOutcome) -> str | None:
        """The earlier patch of the series whose change is ``patch``'s (the same ``git
        patch-id --stable``), so an empty carry is said to be that patch's doing, not
        upstream's; ``None`` when none is (one ``patch-id`` process for them all)."""
        earlier = []
        for other in self.state.patches:
            if other is entry:
                break
            if other.landed:
                earlier.append(other.name)
        if not earlier:
            return None
        # "commit <n>" lines number the diffs: patch-id echoes them beside each id.
        feed = [b"commit %040x\n" % 0 + split_patch(patch.data)[1]]
        for i, name in enumerate(earlier, 1):
            feed.append(
                b"commit %040x\n" % i + split_patch(self._backup_patch(name).data)[1]
            )
        rows = self.store.git(
            "patch-id", "--stable", input=b"\n".join(feed), check=False
        ).stdout.split()
        ids = {int(c, 16): pid for pid, c in zip(rows[::2], rows[1::2], strict=False)}
        mine = ids.get(0)
        for i, name in enumerate(earlier, 1):
            if mine is not None and ids.get(i) == mine:
                return name
        return None

    def _changed(self, old: str, new: str) -> set[str]:
        """Paths that differ between two trees."""
        return {row[5] for row in self.store.diff_tree(old, new)}

    def _stop(
        self, patch: Patch, stop: Stop, message: str, files: dict[str, bytes | None]
    ) -> NoReturn:
        """Save a stop on ``patch``, write its work files, raise :class:`RebaseStopped`."""
        self._write_work(files)
        self.state.patch(patch.name).status = PatchStatus.STOPPED
        self.state.stop = stop
        self.save()
        raise RebaseStopped(message)

    def _stop_on_patch(
        self,
        patch: Patch,
        tree: str,
        carried: Carried,
        keys: dict[str, str],
        found: dict[str, tuple[bytes, str]],
    ) -> NoReturn:
        """Stop on a conflict of merge-ort: diff3 work files for each conflicted path,
        the recorded resolution instead where there is one (``found``, said so), and
        the conflicts' rr-cache ``keys`` in the stop for ``--continue`` to record."""
        merge = carried.merge
        assert merge is not None, "a conflict comes from a merge"
        files: dict[str, bytes | None] = {}
        what: list[str] = []
        edit: list[str] = []
        modes: dict[str, str] = {}
        gitlinks: list[str] = []
        submodules = sorted(
            _git_side_name(p)
            for p, st in merge.stages.items()
            if any(mode == "160000" for mode, _oid in st.values())
        )
        for path, st in sorted(merge.stages.items()):
            kinds = ", ".join(merge.conflict_types(path)) or "CONFLICT"
            if any(mode == "160000" for mode, _oid in st.values()):
                gitlinks.append(path)
                # merge-ort stages the gitlink under "<path>~<commit>" when a file or
                # directory is in its way: the user's name for it is <path>.
                what.append(
                    f"{_git_side_name(path)} ({kinds}: the new base has a submodule there)"
                )
                continue
            modes[path] = (st.get(2) or st.get(3) or st[1])[0]
            edit.append(path)
            under = next((d for d in submodules if path.startswith(d + "/")), None)
            if under is not None:
                files[path] = self._blob((st.get(3) or st.get(2) or st[1])[1])
                what.append(
                    f"{path} ({kinds}: it lies under {under}, a submodule in the new "
                    "base, so it cannot be kept there; the file holds the patch's version "
                    "for reference: `--drop` leaves the patch out, or delete the file and "
                    "`--continue`)"
                )
                continue
            what.append(self._work_file(patch, path, st, kinds, files, tree))
            if path in found:
                files[path] = found[path][0]
                line = self._replay_line(path, patch.name, keys[path], found[path][1])
                self.say(line)
                what[-1] = f"{path} ({kinds}: {line})"
        what += _other_conflicts(merge)
        fix = patch.local_fix
        stop = PatchStop(
            name=patch.name,
            tree=tree,
            merged=carried.tree,
            files=edit,
            modes=modes,
            gitlinks=gitlinks,
            keys={p: k for p, k in keys.items() if p not in found} or None,
        )
        self._stop(
            patch,
            stop,
            f"patch {patch.name} conflicts with the new base: "
            f"{'; '.join(what) or 'see git merge-tree'}. "
            f"Edit the files under {layout.REBASE_WORK_DIR} (markers labelled new base / "
            f"patch pre-image / patch {patch.name}; delete a file there to delete it), then "
            f"`overlay {self.state.kind} --continue`; or `--drop` to leave the patch "
            "out of the series (its file and series line go"
            + (f"; LOCAL_FIXES entry {fix} stays" if fix else "")
            + "), or `--abort` to restore everything",
            files,
        )

    def _work_file(
        self,
        patch: Patch,
        path: str,
        st: dict[int, tuple[str, str]],
        kinds: str,
        files: dict[str, bytes | None],
        tree: str,
    ) -> str:
        """Put the work file(s) of one conflicted path into ``files``; return what the
        stop message says of it (a 3-way text, or which side deleted it)."""
        s1, s2, s3 = st.get(1), st.get(2), st.get(3)
        if s2 and s3:
            texts = (
                self._blob(s2[1]),
                self._blob(s1[1]) if s1 else b"",
                self._blob(s3[1]),
            )
            files[path], _ = self._merge_file(
                *texts,
                ("new base", "patch pre-image", f"patch {patch.name}"),
                diff3=True,
            )
            note = self._formatting_note(path, tree, texts, files)
            return f"{path} ({kinds}" + (f": {note})" if note else ")")
        if s3:
            files[path] = self._blob(s3[1])
            return (
                f"{path} ({kinds}: gone from the new base, changed by the patch; the "
                "file holds the patch's version: keep it to keep it, delete it to "
                "accept the deletion)"
            )
        assert s2 is not None
        files[path] = self._blob(s2[1])
        if s1:
            files[path + ".pre-image"] = self._blob(s1[1])
        return (
            f"{path} ({kinds}: the patch deletes it, the new base changed it; the file "
            f"holds the new base's version and {path}.pre-image what the patch was "
            "made to delete: delete the file to delete it, keep it to keep the new "
            "base's version)"
        )

    def _empty_message(self, name: str) -> str:
        """What the run says of a patch the user's edit left empty."""
        fix = self._backup_patch(name, header_only=True).local_fix
        return (
            f"the resolved patch {name} changes nothing on the new base. It is not "
            f"dropped without your word: `overlay {self.state.kind} --drop` (or "
            "`--skip`) leaves it out of the series (its file and series line go"
            + (
                f"; LOCAL_FIXES entry {fix} stays for you to move or delete"
                if fix
                else ""
            )
            + "), `--abort` restores everything as before the run"
        )

    def _take_patch_edit(
        self, stop: PatchStop, replayed: dict[str, bytes | None] | None = None
    ) -> None:
        """The patch the run stopped on, as the user's work files make it (or, for a
        carry settled by recorded resolutions, as ``replayed`` makes it); the user's
        resolutions of the stop's keyed conflicts are recorded for later runs.

        Raises:
            RebaseStopped: the edit leaves the patch empty (an :class:`EmptyStop`).
            OverlayError: a file would go where the new base has a submodule or file.
        """
        store = self.store
        base = stop.tree
        contents = self._work_contents(stop) if replayed is None else replayed
        if replayed is None:
            self._record_patch_resolutions(stop.name, stop.keys or {}, contents)
        changes = self._edited_changes(stop, contents)
        _refuse_file_under_non_tree(store.entries(base, _parents(changes)), changes)
        new_tree = store.edit_tree(base, changes)
        patch = self._backup_patch(stop.name)
        if new_tree == base:
            # Empty after the edit: never dropped silently.
            self.state.stop = EmptyStop(stop.name)
            self.save()
            remove_dir(self.work)
            raise RebaseStopped(self._empty_message(stop.name))
        # the refresh (and difflib) load only for a patch resolved by hand
        from overlay.engine.refresh import refreshed_bytes

        data = refreshed_bytes(patch.data, tree_diff(store, base, new_tree))
        self.state.patch(stop.name).carried(
            "resolved", new_tree, store.hash_blob(data), data != patch.data
        )

    def _work_contents(self, stop: PatchStop) -> dict[str, bytes | None]:
        """The user's work file of each conflicted path (``None``: deleted)."""
        out: dict[str, bytes | None] = {}
        for rel in stop.files:
            full = os.path.join(self.work, rel)
            if os.path.isfile(full):
                with open(full, "rb") as fh:
                    out[rel] = fh.read()
            else:
                out[rel] = None
        return out

    def _edited_changes(
        self, stop: PatchStop, contents: dict[str, bytes | None]
    ) -> Changes:
        """What merge-ort merged cleanly, then ``contents`` for the conflicted paths
        (``None`` deletes the path)."""
        conflicted = set(stop.files) | set(stop.gitlinks or [])
        changes: Changes = {}
        for old_mode, new_mode, _oo, new_oid, status, path in self.store.diff_tree(
            stop.tree, stop.merged
        ):
            if path in conflicted or "160000" in (old_mode, new_mode):
                # A submodule stays as the new base has it: merge-ort may have moved it
                # aside (``path~<commit>``) to make room for the patch's directory.
                continue
            changes[path] = None if status == "D" else (new_mode, new_oid)
        for rel in stop.files:
            data = contents.get(rel)
            changes[rel] = (
                None
                if data is None
                else (stop.modes.get(rel, "100644"), self.store.hash_blob(data))
            )
        return changes


def _git_side_name(path: str) -> str:
    """``path`` without the ``~<commit>`` suffix merge-ort gives an entry it moved out of
    the way of a file/directory conflict."""
    return re.sub(r"~[0-9a-f]{40}(?:[0-9a-f]{24})?$", "", path)


def _other_conflicts(merge: MergeResult) -> list[str]:
    """git's conflict messages that name no staged path (e.g. a directory that became
    a submodule)."""
    return [
        text
        for paths, kind, text in merge.messages
        if kind.startswith("CONFLICT") and not any(p in merge.stages for p in paths)
    ]


def _parents(changes: Changes) -> list[str]:
    """Every directory above a path the changes write, sorted."""
    return sorted(
        {
            p.rsplit("/", i)[0]
            for p, e in changes.items()
            if e is not None
            for i in range(1, p.count("/") + 1)
        }
    )


def _refuse_file_under_non_tree(
    entries: dict[str, TreeEntry], changes: Changes
) -> None:
    """Never let a file replace what the new base has above it (a directory that became
    a submodule, shared case 13): update-index would silently drop the gitlink.

    Args:
        entries: the new base's entries at the written paths' parents.
        changes: the changes about to be written.
    Raises:
        OverlayError: a written path lies under a submodule or a file (exit 2).
    """
    for prefix, entry in entries.items():
        if entry.kind == "tree":
            continue
        placed = sorted(
            p
            for p, e in changes.items()
            if e is not None and p.startswith(prefix + "/")
        )
        what = "a submodule" if entry.kind == "commit" else "a file"
        raise OverlayError(
            f"{placed[0]}: the new base has {what} at {prefix}, so the patch's file "
            "cannot go there",
            hint=f"delete {os.path.join(layout.REBASE_WORK_DIR, placed[0])} and --continue (the "
            "patch then leaves it alone), or --skip the patch, or --abort",
        )
