"""Rebase and sync: carry the overlay onto a new MLX pin or fork commit (issue 6).

A run recomputes the layers on the new bases:

1. the fork delta onto the new pin. Each conflicted path is settled, in order, by
   carrying its existing resolution (``git merge-file`` of the old resolution, the
   old auto-merge and the new auto-merge), by a resolution recorded in an earlier
   run for the very same conflict (rerere-like, ``.overlay/rr-cache``), or by
   stopping for the user;
2. each patch of the series: dropped when it is already upstream (its reverse
   applies to the new layer, or it becomes empty), applied exactly, merged
   3-way from its pre-image, or stopped on for the user.

A stop writes the conflicted files with labelled markers into
``.overlay/rebase/work/`` and says what to do; ``--continue`` takes the edit,
``--skip`` drops the current patch, ``--abort`` restores every file exactly as
it was. Nothing in ``patches-rocm/`` or ``LOCAL_FIXES.md`` changes until the
whole run completes; then the manifest (with tomlkit, comments kept), the
resolutions, the refreshed patches (only those whose bytes changed), the
series and the two pins named in ``LOCAL_FIXES.md`` are written, and a report
goes to ``.overlay/last-rebase.md``. Every state change is saved before the
next step, so a run killed at any point resumes with ``--continue`` or
rolls back with ``--abort``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
from typing import Any

import tomlkit

from overlay import fixes
from overlay.errors import EXIT_FINDINGS, GitError, OverlayError
from overlay.fsutil import atomic_write
from overlay.gitstore import Store
from overlay.layers import _OFFSET_RE, _Scratch, merge_fork_delta, read_resolutions
from overlay.manifest import MANIFEST_PATH, Manifest, load_manifest
from overlay.patchfmt import DEFAULT_AUTHOR, format_patch, tree_diff
from overlay.refresh import trailer_pairs
from overlay.series import PATCH_DIR, SERIES_PATH, Patch, parse_patch, read_series

STATE_DIR = os.path.join(".overlay", "rebase")
RR_CACHE = os.path.join(".overlay", "rr-cache")
REPORT_MD = os.path.join(".overlay", "last-rebase.md")
REPORT_JSON = os.path.join(".overlay", "last-rebase.json")
RESOLVED = "patches-rocm/resolved"
_MARKER = re.compile(r"^(<{7}|>{7}|={7}$|\|{7})", re.M)


class RebaseStopped(OverlayError):
    """The run stopped at a conflict and waits for the user (exit 1)."""

    exit_code = EXIT_FINDINGS


def _checkpoint(name: str) -> None:
    """Test hook: ``OVERLAY_TEST_KILL_AT=<name>`` SIGKILLs the process here."""
    if os.environ.get("OVERLAY_TEST_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


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
        out += [f"{PATCH_DIR}/{fn}" for fn in sorted(os.listdir(pdir)) if fn.endswith(".patch")]
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
        """True when a run is in progress."""
        return os.path.isfile(os.path.join(self.dir, "state.json"))

    def load(self) -> None:
        """Read the saved state.

        Raises:
            OverlayError: no run in progress (exit 2).
        """
        if not self.active:
            raise OverlayError("no rebase or sync in progress", hint="start one with `overlay rebase --onto SHA`")
        with open(os.path.join(self.dir, "state.json"), encoding="utf-8") as fh:
            self.state = json.load(fh)

    def save(self) -> None:
        """Write the state atomically."""
        os.makedirs(self.dir, exist_ok=True)
        # Rename-atomic, not fsynced: a killed process leaves the old or the new state,
        # never a torn one; a power loss may cost the last step, which is redone.
        atomic_write(os.path.join(self.dir, "state.json"),
                     json.dumps(self.state, indent=1, sort_keys=True).encode(), durable=False)

    # -- start ----------------------------------------------------------------------
    def start(self, kind: str, new: Bases, old: Bases) -> None:
        """Begin a run: back up every file it may change and save the plan.

        Args:
            kind: ``"rebase"`` (new pin) or ``"sync"`` (new fork commit).
            new, old: the bases after and before.
        Raises:
            OverlayError: a run is already in progress (exit 2).
        """
        if self.active:
            raise OverlayError(f"a {self._kind_on_disk()} is already in progress",
                               hint="finish it with --continue / --skip, or --abort it")
        backup = os.path.join(self.dir, "backup")
        if os.path.isdir(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(backup)
        files = _tracked_files(self.root)
        for rel in files:
            dst = os.path.join(backup, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(self.root, rel), dst)
        self.state = {
            "format": 1, "kind": kind, "old": dataclasses.asdict(old), "new": dataclasses.asdict(new),
            "backup": files, "resolutions": {}, "forked": None, "patches": [], "stop": None,
            "committing": False,
        }
        self.save()

    def _kind_on_disk(self) -> str:
        try:
            with open(os.path.join(self.dir, "state.json"), encoding="utf-8") as fh:
                return json.load(fh).get("kind", "rebase")
        except (OSError, ValueError):
            return "rebase"

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

    def _merge_file(self, ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str],
                    diff3: bool = False) -> tuple[bytes, bool]:
        """``git merge-file -p`` on three texts (``--diff3`` adds the base section);
        returns ``(result, clean)``."""
        with tempfile.TemporaryDirectory(prefix="overlay-merge-") as tmp:
            paths = []
            for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
                path = os.path.join(tmp, name)
                with open(path, "wb") as fh:
                    fh.write(data)
                paths.append(path)
            proc = self.store.git("merge-file", "-p", *(["--diff3"] if diff3 else []),
                                  "-L", labels[0], "-L", labels[1], "-L", labels[2], *paths, check=False)
        if proc.returncode < 0 or proc.returncode > 127:
            raise GitError(f"git merge-file failed: {proc.stderr.decode().strip()}")
        return proc.stdout, proc.returncode == 0

    def _stage_text(self, stages: dict, n: int) -> bytes:
        entry = stages.get(str(n)) or stages.get(n)
        return self._blob(entry[1]) if entry else b""

    def _labelled(self, stages: dict, bases: Bases | None) -> bytes:
        """git's conflicted text for one path; markers name the commits, or just the
        sides when ``bases`` is ``None`` (so texts from two runs can be compared)."""
        labels = (("pin", "merge base", "fork") if bases is None else
                  (f"pin {bases.pin[:8]}", f"merge base {bases.merge_base[:8]}", f"fork {bases.fork[:8]}"))
        text, _ = self._merge_file(self._stage_text(stages, 2), self._stage_text(stages, 1),
                                   self._stage_text(stages, 3), labels, diff3=bases is not None)
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

    def _rr_put(self, key: str, data: bytes) -> None:
        os.makedirs(os.path.join(self.root, RR_CACHE), exist_ok=True)
        atomic_write(os.path.join(self.root, RR_CACHE, key), data)

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
                self.state["committing"] = True
                self.save()
            return self._commit(manifest, old, new)
        finally:
            self.close()

    def _settle_fork_delta(self, manifest: Manifest, old: Bases, new: Bases) -> None:
        store = self.store
        merge = merge_fork_delta(store, new.merge_base, new.pin, new.fork, manifest.carry)
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
                    old_merge = merge_fork_delta(store, old.merge_base, old.pin, old.fork, manifest.carry)
                old_stages = {str(k): v for k, v in old_merge.stages.get(path, {}).items()}
                if old_stages:
                    old_auto = self._labelled(old_stages, None)
                    if old_auto == new_auto:
                        decided[path] = {"status": "unchanged", "blob": store.hash_blob(old_res[path]),
                                         "note": "same conflict as before: the recorded resolution applies as is"}
                        self.save()
                        continue
                    carried, clean = self._merge_file(old_res[path], old_auto, new_auto,
                                                      ("recorded resolution", "old auto-merge", "new auto-merge"))
                    if clean and not _MARKER.search(carried.decode("utf-8", "replace")):
                        decided[path] = {"status": "carried", "blob": store.hash_blob(carried),
                                         "note": "recorded resolution carried by a 3-way merge"}
                        self.save()
                        continue
            recorded = self._rr_get(self._conflict_key(new_auto))
            if recorded is not None:
                decided[path] = {"status": "reused", "blob": store.hash_blob(recorded),
                                 "note": "resolution recorded for the same conflict in an earlier run (rr-cache)"}
                self.save()
                continue
            work = {path: self._labelled(stages, new)}
            previous = ""
            if path in old_res:
                # The recorded resolution did not carry over cleanly: put it beside the file.
                work[path + ".recorded"] = old_res[path]
                previous = (f" The recorded resolution {RESOLVED}/{path} no longer merges cleanly; it is "
                            f"beside the file as {os.path.join(STATE_DIR, 'work', path)}.recorded for reference.")
            self._write_work(work)
            self.state["stop"] = {"type": "resolution", "path": path, "key": self._conflict_key(new_auto),
                                  "mode": (merge.stages[path].get(2) or merge.stages[path].get(3))[0],
                                  "recorded": path in old_res}
            self.save()
            raise RebaseStopped(
                f"{path}: the fork delta conflicts with pin {new.pin[:8]}; edit "
                f"{os.path.join(STATE_DIR, 'work', path)} (markers labelled pin / merge base / fork), "
                f"then run `overlay {self.state['kind']} --continue` (or `--abort`).{previous}")
        changes = {}
        for path, entry in decided.items():
            if path in merge.stages:
                mode = (merge.stages[path].get(2) or merge.stages[path].get(3) or ("100644",))[0]
                changes[path] = (mode, entry["blob"])
        scratch = _Scratch()
        try:
            forked = store.edit_tree(merge.tree, changes, scratch.index()) if changes else merge.tree
        finally:
            scratch.close()
        self.state["forked"] = forked
        self.state["stale"] = sorted(p for p in old_res if p not in merge.stages)
        self.state["merge_stats"] = {"carried": len(merge.carried), "conflicts": len(merge.stages)}
        self.state["patches"] = [{"name": name, "status": "pending"} for name, _line in read_series(self.root)]
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
                cache[name] = parse_patch(fh.read(), name, path, header_only=header_only)
        return cache[name]

    def _apply_patches(self) -> None:
        store = self.store
        scratch = _Scratch()
        index = scratch.index()
        env = {"GIT_INDEX_FILE": index}
        holds = None  # the tree the scratch index holds, when known
        try:
            for entry in self.state["patches"]:
                if entry["status"] != "pending":
                    continue
                patch = self._backup_patch(entry["name"], header_only=True)
                tree = self._current_tree()
                if holds != tree:
                    store.git("read-tree", tree, env=env)
                holds = None
                proc = store.git("apply", "--cached", "-v", patch.path, env=env, check=False)
                status = "clean"
                if proc.returncode != 0:
                    # Already upstream? Then its reverse applies to the new layer.
                    rev = store.git("apply", "--cached", "--check", "--reverse", patch.path, env=env, check=False)
                    if rev.returncode == 0:
                        entry.update(status="upstream",
                                     note="its reverse applies cleanly: the change is already there")
                        holds = tree
                        self.save()
                        _checkpoint("patch")
                        continue
                    store.git("read-tree", tree, env=env)
                    proc = store.git("apply", "--cached", "--3way", patch.path, env=env, check=False)
                    unmerged = store.git("ls-files", "-u", "-z", env=env).stdout
                    if proc.returncode != 0 or unmerged:
                        self._stop_on_patch(self._backup_patch(entry["name"]), tree, index)
                    status = "merged"
                new_tree = store.out("write-tree", env=env)
                holds = new_tree
                if new_tree == tree:
                    entry.update(status="upstream", note="it becomes empty on the new base")
                elif status == "clean" and not _OFFSET_RE.search(proc.stderr.decode("utf-8", "replace")):
                    # Exact, no offset: the recorded bytes stay (a byte-stable patch refreshes to itself).
                    entry.update(status=status, tree=new_tree, blob=None, changed=False)
                else:
                    data = self._refresh(patch, tree, new_tree)
                    entry.update(status=status, tree=new_tree, blob=store.hash_blob(data),
                                 changed=data != patch.data)
                self.save()
                _checkpoint("patch")
        finally:
            scratch.close()

    def _refresh(self, patch: Patch, before: str, after: str) -> bytes:
        return format_patch(patch.subject, patch.description, trailer_pairs(patch),
                            tree_diff(self.store, before, after), author=patch.author or DEFAULT_AUTHOR)

    def _stop_on_patch(self, patch: Patch, tree: str, index: str) -> None:
        store = self.store
        env = {"GIT_INDEX_FILE": index}
        stages: dict[str, dict[int, tuple[str, str]]] = {}
        for rec in store.git("ls-files", "-s", "-z", env=env).stdout.decode().split("\0"):
            if not rec:
                continue
            meta, path = rec.split("\t", 1)
            mode, oid, stage = meta.split()
            if path in patch.touched:
                stages.setdefault(path, {})[int(stage)] = (mode, oid)
        files: dict[str, bytes | None] = {}
        conflicted = []
        post = {}
        for m in re.finditer(r"^diff --git a/(\S+) b/(\S+)\n(?:.*\n)*?index [0-9a-f]+\.\.([0-9a-f]+)",
                             patch.data.decode("utf-8", "replace"), re.M):
            post[m.group(2)] = m.group(3)
        for path in sorted(patch.touched):
            st = stages.get(path)
            if not st:
                # Not in the new layer. Show what the patch wanted (its post-image) when the
                # patch does not delete it: the user deletes it to accept the new layer.
                oid = post.get(path)
                if path not in patch.deleted and oid and store.has_object(oid, "blob"):
                    files[path] = self._blob(oid)
                    conflicted.append(f"{path} (gone from the new layer)")
                else:
                    files[path] = None
            elif 0 in st:
                files[path] = self._blob(st[0][1])
            else:
                conflicted.append(path)
                files[path], _ = self._merge_file(
                    self._blob(st[2][1]) if 2 in st else b"", self._blob(st[1][1]) if 1 in st else b"",
                    self._blob(st[3][1]) if 3 in st else b"",
                    ("new layer below", "patch pre-image", f"patch {patch.name}"))
        self._write_work(files)
        entry = next(e for e in self.state["patches"] if e["name"] == patch.name)
        entry["status"] = "stopped"
        self.state["stop"] = {"type": "patch", "name": patch.name, "tree": tree,
                              "files": sorted(patch.touched), "conflicted": conflicted,
                              "modes": {p: st.get(0, st.get(2, st.get(3, ("100644", ""))))[0]
                                        for p, st in stages.items()}}
        self.save()
        fix = patch.local_fix
        raise RebaseStopped(
            f"patch {patch.name} does not apply to the new layer: conflicts in {', '.join(conflicted) or 'its files'}; "
            f"edit the files under {os.path.join(STATE_DIR, 'work')} (delete a file there to delete it), then run "
            f"`overlay {self.state['kind']} --continue`, or `--skip` to drop the patch"
            + (f" (LOCAL_FIXES entry {fix})" if fix else "") + ", or `--abort`")

    # -- user actions --------------------------------------------------------------------
    def continue_(self) -> dict:
        """Take the user's edit for the current stop and go on (see :meth:`run`).

        Raises:
            RebaseStopped: markers remain (exit 1, naming path and line), or the
            next conflict stops the run.
        """
        stop = self.state.get("stop")
        if stop:
            paths = [stop["path"]] if stop["type"] == "resolution" else stop["files"]
            for rel in paths:
                full = os.path.join(self.work, rel)
                if os.path.isfile(full):
                    with open(full, "rb") as fh:
                        text = fh.read().decode("utf-8", "replace")
                    m = _MARKER.search(text)
                    if m:
                        line = text.count("\n", 0, m.start()) + 1
                        raise RebaseStopped(f"{os.path.join(STATE_DIR, 'work', rel)}:{line}: conflict marker "
                                            "left; finish the edit, then --continue again")
            if stop["type"] == "resolution":
                with open(os.path.join(self.work, stop["path"]), "rb") as fh:
                    data = fh.read()
                self._rr_put(stop["key"], data)
                self.state["resolutions"][stop["path"]] = {"status": "resolved", "blob": self.store.hash_blob(data),
                                                           "note": "conflict resolved by hand"}
            else:
                self._take_patch_edit(stop)
            self.state["stop"] = None
            self.save()
            shutil.rmtree(self.work, ignore_errors=True)
        return self.run()

    def _take_patch_edit(self, stop: dict) -> None:
        changes: dict[str, tuple[str, str] | None] = {}
        for rel in stop["files"]:
            full = os.path.join(self.work, rel)
            if os.path.isfile(full):
                with open(full, "rb") as fh:
                    changes[rel] = (stop["modes"].get(rel, "100644"), self.store.hash_blob(fh.read()))
            else:
                changes[rel] = None
        scratch = _Scratch()
        try:
            new_tree = self.store.edit_tree(stop["tree"], changes, scratch.index())
        finally:
            scratch.close()
        entry = next(e for e in self.state["patches"] if e["name"] == stop["name"])
        patch = self._backup_patch(stop["name"])
        if new_tree == stop["tree"]:
            entry.update(status="upstream", note="the resolved patch is empty")
        else:
            data = self._refresh(patch, stop["tree"], new_tree)
            entry.update(status="resolved", tree=new_tree, blob=self.store.hash_blob(data), changed=True)

    def skip(self) -> dict:
        """Drop the patch the run stopped on and go on.

        Raises:
            OverlayError: the run did not stop on a patch (exit 2).
        """
        stop = self.state.get("stop")
        if not stop or stop["type"] != "patch":
            raise OverlayError("--skip drops a patch; the run is not stopped on one",
                               hint="a conflicting fork path needs a resolution: edit it and --continue")
        entry = next(e for e in self.state["patches"] if e["name"] == stop["name"])
        fix = self._backup_patch(stop["name"], header_only=True).local_fix
        entry.update(status="skipped", note=f"dropped by --skip; move or delete LOCAL_FIXES entry {fix}"
                     if fix else "dropped by --skip")
        self.state["stop"] = None
        self.save()
        shutil.rmtree(self.work, ignore_errors=True)
        return self.run()

    def abort(self) -> list[str]:
        """Restore every file the run may have changed, byte for byte, and forget the run.

        Returns:
            Relative paths restored or removed.
        """
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
        shutil.rmtree(self.dir)
        return sorted(touched)

    # -- completion ---------------------------------------------------------------------
    def _commit(self, manifest: Manifest, old: Bases, new: Bases) -> dict:
        root = self.root
        if not self.state.get("commit_started"):
            # Never overwrite what the user edited while the run was stopped.
            backup = os.path.join(self.dir, "backup")
            edited = []
            for rel in self.state["backup"]:
                try:
                    with open(os.path.join(root, rel), "rb") as a, open(os.path.join(backup, rel), "rb") as b:
                        if a.read() != b.read():
                            edited.append(rel)
                except FileNotFoundError:
                    edited.append(rel)
            if edited:
                raise OverlayError(f"changed since the {self.state['kind']} started: {', '.join(edited)}",
                                   hint="move your edits aside and run --continue again (or --abort)")
            self.state["commit_started"] = True
            self.save()
        # 1. manifest, comments preserved
        mpath = os.path.join(root, MANIFEST_PATH)
        with open(mpath, encoding="utf-8") as fh:
            doc = tomlkit.parse(fh.read())
        doc["upstream"]["pin"] = new.pin
        doc["fork"]["commit"] = new.fork
        doc["fork"]["merge-base"] = new.merge_base
        _write_if_changed(mpath, tomlkit.dumps(doc).encode())
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
        new_series = "".join(ln + "\n" for ln in old_series.splitlines()
                             if ln.split("#", 1)[0].strip() in kept or not ln.split("#", 1)[0].strip())
        if new_series != old_series:
            atomic_write(series_path, new_series.encode())
        # 4. the pins named in LOCAL_FIXES.md
        lf = os.path.join(root, fixes.FILE_NAME)
        if os.path.isfile(lf):
            with open(lf, encoding="utf-8") as fh:
                text = fh.read()
            updated = re.sub(r"^(# Local changes relative to \S+@)[0-9a-fA-F]{8}", rf"\g<1>{new.fork[:8]}",
                             text, count=1, flags=re.M)
            updated = re.sub(r"^(## Retarget onto the MLX pin \()[0-9a-fA-F]{8}\)", rf"\g<1>{new.pin[:8]})",
                             updated, count=1, flags=re.M)
            if updated != text:
                atomic_write(lf, updated.encode())
        report = self.report(old, new)
        os.makedirs(os.path.join(root, ".overlay"), exist_ok=True)
        from overlay.rebase_report import render_markdown
        atomic_write(os.path.join(root, REPORT_MD), render_markdown(report).encode())
        atomic_write(os.path.join(root, REPORT_JSON), json.dumps(report, indent=2).encode())
        shutil.rmtree(self.dir)
        return report

    def report(self, old: Bases, new: Bases) -> dict:
        """The run's outcome as plain data (see :mod:`overlay.rebase_report`)."""
        resolutions = [{"path": p, "status": e["status"], "note": e.get("note", "")}
                       for p, e in sorted(self.state["resolutions"].items())]
        resolutions += [{"path": p, "status": "removed", "note": "the path no longer conflicts"}
                        for p in self.state.get("stale", [])]
        patches = []
        for entry in self.state["patches"]:
            patch = self._backup_patch(entry["name"], header_only=True)
            status = entry["status"]
            if status == "clean" and entry.get("changed"):
                status = "clean (refreshed)"
            patches.append({"name": entry["name"], "status": status, "local_fix": patch.local_fix,
                            "note": entry.get("note", "")})
        return {
            "kind": self.state["kind"],
            "pins": {"before": dataclasses.asdict(old), "after": dataclasses.asdict(new)},
            "merge": self.state.get("merge_stats", {}),
            "resolutions": resolutions,
            "patches": patches,
            "range_diff": self._range_diff(),
            "next_steps": self._next_steps(resolutions),
        }

    @staticmethod
    def _next_steps(resolutions: list[dict]) -> list[str]:
        steps = []
        changed = [r["path"] for r in resolutions if r["status"] != "unchanged"]
        if changed:
            steps.append("review the retarget entries of LOCAL_FIXES.md for " + ", ".join(changed)
                         + " (new resolutions need an entry: overlay fix new --section retarget ...)")
        return steps + ["overlay verify", "overlay build --backend rocm", "overlay suite run"]

    def _range_diff(self) -> str:
        """``git range-diff`` of the old series (on the old layer) against the new one.

        When every patch applied exactly and keeps its bytes there is nothing to
        compare: the range-diff would pair each patch with itself (``=``), so it is
        summarized without running git.
        """
        entries = self.state["patches"]
        if all(e["status"] == "clean" and not e.get("changed") for e in entries):
            return "".join(f"{i}: = {i}: {self._backup_patch(e['name'], header_only=True).subject}\n"
                           for i, e in enumerate(entries, 1))
        store = self.store
        try:
            from overlay.layers import compute_layers
            old_man = Bases(**self.state["old"])
            backup_root = os.path.join(self.dir, "backup")
            layers = compute_layers(store, self._manifest(), backup_root, pin=old_man.pin, fork=old_man.fork,
                                    merge_base=old_man.merge_base,
                                    patches=[self._backup_patch(e["name"]) for e in entries], stepwise=True)
        except OverlayError:
            return ""

        def chain(base_tree: str, trees: list[tuple[str, str]]) -> tuple[str, str]:
            specs = [(base_tree, [], "overlay: layer below the series")]
            specs += [(tree, [i], subject) for i, (subject, tree) in enumerate(trees)]
            shas = store.commit_chain(specs)
            return shas[0], shas[-1]

        old_base, old_tip = chain(layers.forked, [(r.patch.subject, r.tree) for r in layers.patches])
        new_trees = [(self._backup_patch(e["name"], header_only=True).subject, e["tree"]) for e in entries
                     if e.get("tree") and e["status"] in ("clean", "merged", "resolved")]
        new_base, new_tip = chain(self.state["forked"], new_trees)
        proc = store.git("range-diff", "--no-color", f"{old_base}..{old_tip}", f"{new_base}..{new_tip}",
                         check=False)
        return proc.stdout.decode("utf-8", "replace")


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
    for dirpath, _dirnames, _filenames in sorted(os.walk(top, topdown=False), key=lambda t: -len(t[0])):
        if not os.listdir(dirpath):
            os.rmdir(dirpath)
