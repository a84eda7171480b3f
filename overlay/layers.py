"""The three layers as git tree objects (DESIGN 5).

* ``pin``: the tree of the MLX pin.
* ``forked``: the fork delta (``merge-base..fork``, carried paths only) merged
  onto ``pin`` by ``git merge-tree``; a conflicted path takes
  ``patches-rocm/resolved/<path>``; a conflict with no resolution is an error
  naming the path and its conflict hunks; a resolution whose path does not
  conflict is *stale* (reported, not applied).
* ``patched``: the series applied in order onto ``forked`` with
  ``git apply --cached`` on a temporary index: exactly, or by a clean 3-way
  merge from the recorded pre-image blobs. No fuzz; an offset is reported.

Same inputs, same tree SHA: the synthetic commits the merge runs on have a
fixed identity and date. git does all merging and applying.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tempfile
from typing import Callable, Sequence

from overlay.errors import LayerError
from overlay.fsutil import atomic_write
from overlay.gitstore import EMPTY_TREE, Store, first_error_line, zsplit
from overlay.manifest import Manifest
from overlay.paths import Carry, check_path
from overlay.series import Patch, load_series

RESOLVED_DIR = os.path.join("patches-rocm", "resolved")
LAYERS = ("pin", "forked", "patched")

_OFFSET_RE = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.", re.M)
_CHECKING_RE = re.compile(r"^Checking patch (.+)\.\.\.$", re.M)
_FAILED_AT_RE = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)


@dataclasses.dataclass
class Conflict:
    """A carried path where the fork delta conflicts with the pin.

    Attributes:
        path: repository path.
        hunks: ``(first_line, last_line)`` of each conflict region in git's
            merged text (1-based, markers included); empty for a
            modify/delete conflict.
        resolved: true when ``patches-rocm/resolved/<path>`` supplied the result.
    """

    path: str
    hunks: list[tuple[int, int]]
    resolved: bool = False

    def describe(self) -> str:
        """``path (conflict hunks at lines a-b, c-d)`` for messages."""
        if not self.hunks:
            return f"{self.path} (modify/delete or type conflict)"
        spans = ", ".join(f"{a}-{b}" for a, b in self.hunks)
        return f"{self.path} (conflict hunks at lines {spans})"


@dataclasses.dataclass
class PatchResult:
    """How one patch of the series applied.

    Attributes:
        patch: the parsed patch.
        state: ``"exact"``, ``"offset"`` (applied, but a hunk moved),
            ``"merged"`` (clean 3-way from its pre-image blobs).
        offsets: ``(file, hunk_number, offset_lines)`` for each moved hunk.
        tree: the tree after this patch, or ``None`` when the series was
            applied in one batch (the fast path).
    """

    patch: Patch
    state: str
    offsets: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)
    tree: str | None = None


@dataclasses.dataclass
class Layers:
    """The computed layers and what was learned computing them.

    Attributes:
        pin, forked, patched: tree SHAs (``patched`` is the overlay's identity).
        carried_changes: fork-delta paths carried onto the pin (sorted).
        dropped_changes: fork-delta paths the manifest does not carry (sorted).
        conflicts: carried paths that conflicted (all resolved when this object exists).
        stale_resolutions: ``resolved/`` paths that no longer conflict.
        patches: one :class:`PatchResult` per series entry.
    """

    pin: str
    forked: str
    patched: str
    carried_changes: list[str]
    dropped_changes: list[str]
    conflicts: list[Conflict]
    stale_resolutions: list[str]
    patches: list[PatchResult]

    def tree(self, layer: str) -> str:
        """The tree SHA of ``layer`` (``pin``, ``forked`` or ``patched``)."""
        return {"pin": self.pin, "forked": self.forked, "patched": self.patched}[layer]


def conflict_hunks(text: bytes) -> list[tuple[int, int]]:
    """Line spans of ``<<<<<<<`` ... ``>>>>>>>`` regions in merged text (1-based)."""
    spans, start = [], None
    for number, line in enumerate(text.split(b"\n"), 1):
        if line.startswith(b"<<<<<<<"):
            start = number
        elif line.startswith(b">>>>>>>") and start is not None:
            spans.append((start, number))
            start = None
    return spans


def read_resolutions(root: str) -> dict[str, bytes]:
    """Every file under ``<root>/patches-rocm/resolved/``, keyed by repository path."""
    base = os.path.join(root, RESOLVED_DIR)
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            rel = os.path.relpath(full, base).replace(os.sep, "/")
            check_path(rel, what="resolution")
            with open(full, "rb") as fh:
                out[rel] = fh.read()
    return out


_SCRATCH_DIR: list[str] = []


def _scratch_dir() -> str:
    """One private temporary directory per process for index files (removed at exit)."""
    if not _SCRATCH_DIR:
        import atexit
        import shutil
        path = tempfile.mkdtemp(prefix="overlay-idx-")
        atexit.register(shutil.rmtree, path, True)
        _SCRATCH_DIR.append(path)
    return _SCRATCH_DIR[0]


class _Scratch:
    """Names for temporary index files; :meth:`close` removes the ones it handed out."""

    _counter = 0

    def __init__(self) -> None:
        self._paths: list[str] = []

    def index(self) -> str:
        _Scratch._counter += 1
        path = os.path.join(_scratch_dir(), f"index{_Scratch._counter}")
        self._paths.append(path)
        return path

    def close(self) -> None:
        for path in self._paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._paths.clear()


@dataclasses.dataclass
class ForkMerge:
    """git's merge of the carried fork delta onto a pin, before any resolution.

    Attributes:
        tree: the merged tree (conflicted paths hold git's text with markers).
        carried, dropped: fork-delta paths carried / not carried (sorted).
        stages: conflicted path -> ``{stage: (mode, oid)}`` with stage 1 (merge
            base), 2 (pin) and 3 (fork); a missing stage means that side deleted it.
    """

    tree: str
    carried: list[str]
    dropped: list[str]
    stages: dict[str, dict[int, tuple[str, str]]]


def merge_fork_delta(store: Store, base: str, pin: str, fork: str, carry: Callable[[str], bool]) -> ForkMerge:
    """Merge ``base..fork`` (carried paths only) onto ``pin`` with ``git merge-tree``.

    Args:
        store: the git store holding all three commits.
        base, pin, fork: commit SHAs (fork merge base, MLX pin, fork commit).
        carry: predicate on paths (see :class:`overlay.paths.Carry`).
    Returns:
        :class:`ForkMerge`.
    Raises:
        UnsafePath: a fork path is hostile.
        LayerError: git merge-tree failed for another reason than conflicts.
    """
    scratch = _Scratch()
    try:
        base_tree, pin_tree = store.tree_of(base), store.tree_of(pin)
        delta = store.diff_tree(base_tree, store.tree_of(fork))
        carried, dropped, changes = [], [], {}
        for _om, new_mode, _oo, new_oid, status, path in delta:
            check_path(path, what="fork tree entry")
            if not carry(path):
                dropped.append(path)
                continue
            carried.append(path)
            changes[path] = None if status == "D" else (new_mode, new_oid)
        if not changes:
            return ForkMerge(pin_tree, carried, dropped, {})
        theirs = store.edit_tree(base_tree, changes, scratch.index())
        if pin_tree == base_tree:
            return ForkMerge(theirs, carried, dropped, {})
        c_base, c_pin, c_fork = store.commit_chain([(base_tree, [], "overlay: fork merge base"),
                                                    (pin_tree, [0], "overlay: pin"),
                                                    (theirs, [0], "overlay: carried fork delta")])
        proc = store.git("merge-tree", "--write-tree", "-z", "--no-messages", c_pin, c_fork, check=False)
        if proc.returncode not in (0, 1):
            raise LayerError(f"git merge-tree failed on the fork delta: {first_error_line(proc.stderr)}")
        fields = zsplit(proc.stdout)
        stages: dict[str, dict[int, tuple[str, str]]] = {}
        for rec in fields[1:]:
            if not rec:
                continue
            meta, path = rec.split("\t", 1)
            mode, oid, stage = meta.split()
            check_path(path, what="conflicted path")
            stages.setdefault(path, {})[int(stage)] = (mode, oid)
        return ForkMerge(fields[0], carried, dropped, stages)
    finally:
        scratch.close()


def compute_forked(store: Store, base: str, pin: str, fork: str, carry: Callable[[str], bool],
                   resolutions: dict[str, bytes]) -> tuple[str, list[str], list[str], list[Conflict], list[str]]:
    """Merge the carried fork delta onto the pin and apply the recorded resolutions.

    Args:
        store: the git store holding all three commits.
        base, pin, fork: commit SHAs (fork merge base, MLX pin, fork commit).
        carry: predicate on paths (see :class:`overlay.paths.Carry`).
        resolutions: path -> resolved content (``patches-rocm/resolved/``).
    Returns:
        ``(forked_tree, carried_paths, dropped_paths, conflicts, stale_resolutions)``.
    Raises:
        LayerError: a conflicted path has no resolution (exit 1); the message
        names every such path and its conflict hunks.
    """
    merge = merge_fork_delta(store, base, pin, fork, carry)
    conflicts: list[Conflict] = []
    fixes: dict[str, tuple[str, str] | None] = {}
    with store.cat_file() as cat:
        for path, stage in sorted(merge.stages.items()):
            mode = (stage.get(2) or stage.get(3) or stage.get(1) or ("100644", ""))[0]
            if path in resolutions:
                fixes[path] = (mode, store.hash_blob(resolutions[path]))
                conflicts.append(Conflict(path, [], resolved=True))
                continue
            hunks: list[tuple[int, int]] = []
            entry = store.git("ls-tree", "-z", merge.tree, "--", path).stdout
            if entry:
                hunks = conflict_hunks(cat.read(entry.split(b"\t", 1)[0].split()[2].decode())[1])
            conflicts.append(Conflict(path, hunks))
    unresolved = [c for c in conflicts if not c.resolved]
    if unresolved:
        raise LayerError(
            f"fork delta conflicts with the pin in {len(unresolved)} path(s) without a resolution: "
            + "; ".join(c.describe() for c in unresolved),
            hint="resolve with `overlay rebase`, or write patches-rocm/resolved/<path>")
    scratch = _Scratch()
    try:
        forked = store.edit_tree(merge.tree, fixes, scratch.index()) if fixes else merge.tree
    finally:
        scratch.close()
    stale = sorted(p for p in resolutions if p not in merge.stages)
    return forked, merge.carried, merge.dropped, conflicts, stale


class PatchApplyError(LayerError):
    """A patch of the series does not apply (exit 1).

    Attributes:
        patch: the patch's name; file, hunk: where it failed (may be ``None``);
        reason: why, in words.
    """

    def __init__(self, patch: str, file: str | None, hunk: int | None, reason: str):
        where = f"{file}" + (f" hunk #{hunk}" if hunk else "") if file else "(no file)"
        super().__init__(f"patch {patch} does not apply: {where}: {reason}",
                         hint="refresh the patch against the layer below, or resolve it with `overlay rebase`")
        self.patch, self.file, self.hunk, self.reason = patch, file, hunk, reason


def _hunk_number(patch: Patch, file: str, line: int) -> int | None:
    for change in patch.changes:
        if file in (change.source, change.target):
            for number, hunk in enumerate(change.hunks, 1):
                if hunk.source_start == line or (hunk.source_length == 0 and hunk.source_start + 1 == line):
                    return number
            return 1 if change.hunks else None
    return None


def _apply(store: Store, index_file: str, files: Sequence[str], three_way: bool):
    args = ["apply", "--cached", "-v", "--whitespace=nowarn"]
    if three_way:
        args.append("--3way")
    return store.git(*args, *files, env={"GIT_INDEX_FILE": index_file}, check=False)


def _changed_paths(store: Store, old: str, new: str) -> set[str]:
    return {row[5] for row in store.diff_tree(old, new)}


def _check_applied(patch: Patch, stderr: str, before: str, after: str, store: Store) -> None:
    if "Skipped patch" in stderr:
        skipped = re.findall(r"Skipped patch '(.+)'", stderr)
        raise PatchApplyError(patch.name, skipped[0] if skipped else None, None,
                              "git skipped this file although it exited 0")
    changed = _changed_paths(store, before, after)
    missing = sorted(p for p in patch.touched if p not in changed)
    if missing:
        raise PatchApplyError(patch.name, missing[0], None,
                              f"the patch lists {len(patch.touched)} path(s) but changed only "
                              f"{len(patch.touched) - len(missing)}")


def _explain_failure(store: Store, tree: str, patch: Patch, exact_err: str, three_err: str) -> PatchApplyError:
    m = _FAILED_AT_RE.search(exact_err)
    file = m.group(1) if m else None
    hunk = _hunk_number(patch, file, int(m.group(2))) if m else None
    fm = None
    if file is None:
        fm = re.search(r"error: (.+?): (does not exist in index|already exists in index|patch does not apply)", exact_err)
        file = fm.group(1) if fm else (patch.changes[0].path if patch.changes else None)
        if fm and fm.group(2) != "patch does not apply":
            return PatchApplyError(patch.name, file, None, fm.group(2))
    if "lacks the necessary blob" in three_err or "repository lacks" in three_err:
        reason = ("context differs and the 3-way fallback cannot run: the pre-image blob named "
                  "by its index line is not in the git store")
    elif "with conflicts" in three_err:
        reason = "context differs and the 3-way merge from its pre-image conflicts"
    elif m is None and fm is None:
        reason = "git cannot read it: " + first_error_line(exact_err.encode())
    else:
        reason = "context differs and no 3-way merge was possible"
    if file is not None and b"\r\n" not in patch.data:
        target = store.git("cat-file", "blob", f"{tree}:{file}", check=False).stdout
        if b"\r\n" in target:
            reason += " (the target has CRLF line endings, the patch LF)"
    return PatchApplyError(patch.name, file, hunk, reason)


def apply_series(store: Store, base_tree: str, patches: Sequence[Patch], *,
                 stepwise: bool = False) -> tuple[str, list[PatchResult]]:
    """Apply ``patches`` in order onto ``base_tree``.

    Fast path (``stepwise`` false): one ``git apply --cached`` of the whole
    series; used when every patch applies exactly and every listed file
    changes. Otherwise, and when ``stepwise`` is true, one patch at a time:
    exact first, then ``--3way`` from the pre-image blobs.

    Args:
        store: git store.
        base_tree: the ``forked`` tree.
        patches: parsed series.
        stepwise: record the tree after each patch (rebase and attribution need it).
    Returns:
        ``(patched_tree, results)``.
    Raises:
        PatchApplyError: a patch does not apply, git skipped a file, or it
        changed fewer files than it lists (exit 1).
    """
    if not patches:
        return base_tree, []
    for patch in patches:
        for change in patch.changes:
            if change.binary and not change.binary_data:
                raise PatchApplyError(patch.name, change.path, None,
                                      "binary change without data ('Binary files differ'); "
                                      "re-export it with --binary")
    scratch = _Scratch()
    try:
        files = [p.path for p in patches]
        if not stepwise:
            index = scratch.index()
            store.git("read-tree", base_tree, env={"GIT_INDEX_FILE": index})
            proc = _apply(store, index, files, three_way=False)
            err = proc.stderr.decode("utf-8", "replace")
            if proc.returncode == 0 and not _OFFSET_RE.search(err) and "Skipped patch" not in err:
                tree = store.out("write-tree", env={"GIT_INDEX_FILE": index})
                listed = set().union(*(p.touched for p in patches))
                if _changed_paths(store, base_tree, tree) == listed:
                    return tree, [PatchResult(p, "exact") for p in patches]
        results = []
        tree = base_tree
        index = scratch.index()
        # One index for the whole series: git apply changes nothing when it fails, so the
        # index holds ``tree`` before every patch without a read-tree of its own.
        store.git("read-tree", tree, env={"GIT_INDEX_FILE": index})
        for patch in patches:
            proc = _apply(store, index, [patch.path], three_way=False)
            err = proc.stderr.decode("utf-8", "replace")
            state, offsets = "exact", []
            if proc.returncode != 0:
                proc3 = _apply(store, index, [patch.path], three_way=True)
                err3 = proc3.stderr.decode("utf-8", "replace")
                unmerged = store.git("ls-files", "-u", env={"GIT_INDEX_FILE": index}).stdout
                if proc3.returncode != 0 or unmerged:
                    raise _explain_failure(store, tree, patch, err, err3)
                state, err = "merged", err3
            else:
                current = None
                for line in err.splitlines():
                    cm = _CHECKING_RE.match(line)
                    if cm:
                        current = cm.group(1)
                    om = _OFFSET_RE.match(line)
                    if om:
                        offsets.append((current or "?", int(om.group(1)), int(om.group(3))))
                if offsets:
                    state = "offset"
            new_tree = store.out("write-tree", env={"GIT_INDEX_FILE": index})
            _check_applied(patch, err, tree, new_tree, store)
            results.append(PatchResult(patch, state, offsets, new_tree))
            tree = new_tree
        return tree, results
    finally:
        scratch.close()


def ensure_commits(store: Store, manifest: Manifest, *, pin: str | None = None,
                   fork: str | None = None, merge_base: str | None = None) -> tuple[str, str, str]:
    """Point the store's remotes at the manifest's URLs and make the three commits present.

    Returns:
        ``(pin, fork_commit, merge_base)`` after overrides.
    Raises:
        OfflineMiss, GitError: a commit is missing and cannot be fetched (exit 2).
    """
    for name, url in manifest.remote_urls().items():
        store.set_remote(name, url)
    pin = pin or manifest.pin
    fork = fork or manifest.fork_commit
    merge_base = merge_base or manifest.merge_base
    store.ensure_commit(pin, ["upstream", "fork"])
    store.ensure_commit(fork, ["fork"])
    store.ensure_commit(merge_base, ["fork", "upstream"])
    return pin, fork, merge_base


def compute_layers(store: Store, manifest: Manifest, root: str, *, pin: str | None = None,
                   fork: str | None = None, merge_base: str | None = None,
                   patches: Sequence[Patch] | None = None, stepwise: bool = False) -> Layers:
    """All three layers for the overlay at ``root`` (manifest values unless overridden).

    Args:
        store: git store (commits are fetched on demand unless it is offline).
        manifest: the validated manifest.
        root: overlay repository (``patches-rocm/`` lives there).
        pin, fork, merge_base: override the manifest's commits (preview a bump).
        patches: use this series instead of reading ``series``.
        stepwise: keep each patch's tree (see :func:`apply_series`).
    Returns:
        :class:`Layers`.
    Raises:
        LayerError: unresolved conflict or a patch that does not apply (exit 1).
        GitError, OfflineMiss, PatchFormatError, UnsafePath: bad input (exit 2).
    """
    with store.lock():
        series = list(load_series(root) if patches is None else patches)
        resolutions = read_resolutions(root)
        pin = pin or manifest.pin
        fork = fork or manifest.fork_commit
        merge_base = merge_base or manifest.merge_base
        key = _cache_key(manifest, pin, fork, merge_base, resolutions, series)
        cached = _cache_read(store, key, series, stepwise)
        if cached is not None:
            for name, url in manifest.remote_urls().items():
                store.set_remote(name, url)
            return cached
        pin, fork, merge_base = ensure_commits(store, manifest, pin=pin, fork=fork, merge_base=merge_base)
        forked, carried, dropped, conflicts, stale = compute_forked(
            store, merge_base, pin, fork, manifest.carry, resolutions)
        patched, results = apply_series(store, forked, series, stepwise=stepwise)
        layers = Layers(pin=store.tree_of(pin), forked=forked, patched=patched,
                        carried_changes=carried, dropped_changes=dropped, conflicts=conflicts,
                        stale_resolutions=stale, patches=results)
        _cache_write(store, key, layers, stepwise)
    return layers


#: Bump when the layer algorithm changes what a tree would be for the same inputs.
LAYER_CACHE_VERSION = 1


def _cache_key(manifest: Manifest, pin: str, fork: str, merge_base: str, resolutions: dict[str, bytes],
               series: Sequence[Patch]) -> str:
    """sha256 over everything a layer depends on: commits, carry globs, resolutions, patch bytes."""
    h = hashlib.sha256(json.dumps([LAYER_CACHE_VERSION, pin, fork, merge_base, manifest.include,
                                   manifest.exclude]).encode())
    for path, data in sorted(resolutions.items()):
        h.update(b"R" + path.encode() + b"\0" + hashlib.sha256(data).digest())
    for patch in series:
        h.update(b"P" + patch.name.encode() + b"\0" + hashlib.sha256(patch.data).digest())
    return h.hexdigest()


def _cache_path(store: Store, key: str) -> str:
    return os.path.join(store.git_dir, "overlay-layers", key[:2], key[2:] + ".json")


def _cache_read(store: Store, key: str, series: Sequence[Patch], stepwise: bool) -> Layers | None:
    """The cached layers for ``key``, or ``None`` (absent, unreadable, or its trees pruned)."""
    try:
        with open(_cache_path(store, key), encoding="utf-8") as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    if (stepwise and not rec.get("stepwise")) or len(rec.get("patches", [])) != len(series):
        return None
    if not store.has_object(rec["patched"], "tree"):
        return None
    return Layers(pin=rec["pin"], forked=rec["forked"], patched=rec["patched"],
                  carried_changes=rec["carried"], dropped_changes=rec["dropped"],
                  conflicts=[Conflict(c[0], [tuple(h) for h in c[1]], c[2]) for c in rec["conflicts"]],
                  stale_resolutions=rec["stale"],
                  patches=[PatchResult(p, r["state"], [tuple(o) for o in r["offsets"]], r["tree"])
                           for p, r in zip(series, rec["patches"])])


def _cache_write(store: Store, key: str, layers: Layers, stepwise: bool) -> None:
    rec = {"pin": layers.pin, "forked": layers.forked, "patched": layers.patched,
           "carried": layers.carried_changes, "dropped": layers.dropped_changes,
           "conflicts": [[c.path, c.hunks, c.resolved] for c in layers.conflicts],
           "stale": layers.stale_resolutions, "stepwise": stepwise,
           "patches": [{"state": r.state, "offsets": r.offsets, "tree": r.tree} for r in layers.patches]}
    path = _cache_path(store, key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, json.dumps(rec).encode(), durable=False)
    except OSError:
        pass  # a cache that cannot be written only costs time


__all__ = ["Carry", "Conflict", "EMPTY_TREE", "LAYERS", "Layers", "PatchApplyError", "PatchResult",
           "ForkMerge", "apply_series", "compute_forked", "merge_fork_delta", "compute_layers", "conflict_hunks", "ensure_commits",
           "read_resolutions"]
