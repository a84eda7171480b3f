"""Carrying each overlay file's own change onto the pin, and the upstream lines a patch removes.

A whole-file overlay holds copies: the fork's file (or, for a core file the fork does
not touch, MLX's file at the fork's merge base) plus the team's local changes, copied
over an MLX checkout. Written over the pin as it stands, such a copy also undoes
every line upstream added to that file after the copy was made. So the
import takes each file's change against the file it was copied from and carries it
onto the forked layer by merge-ort, as a rebase carries a patch: upstream's later
lines are kept. Where that merge conflicts, the overlay's whole file is used, as
before, and the upstream lines the patch then removes are named (the idea of LAY005,
for a patch instead of a resolution).
"""

import dataclasses
from collections.abc import Sequence

from overlay.git.store import Store, TreeEntry
from overlay.records.filediff import diff_pieces, parse_file_diff

#: What a copy was made from, by the report's words.
FROM_FORK = "the fork commit's file"
FROM_BASE = "the merge base's file"
FROM_PIN = "the pin's file"

#: How many removed upstream lines one path lists before it says "and N more".
SHOWN_LINES = 8


@dataclasses.dataclass
class Removed:
    """Upstream lines one imported patch removes from one file.

    Attributes:
        path: the tree path.
        source: what the overlay's copy was taken to be made from (:data:`FROM_FORK`
            or :data:`FROM_BASE`).
        lines: ``(line of the forked layer's file, its text)`` of each upstream line
            (one the forked layer has and the copy's base lacks) the patch deletes;
            ``(0, "binary file")`` for a binary file upstream changed.
        conflict: true when the carry conflicted and the patch is the whole file.
        kind: ``patch`` (an imported patch deletes them) or ``resolution`` (the
            resolution holds the overlay's lines in a conflict region instead; the
            lines are then the pin's file's, and ``source`` is :data:`FROM_PIN`).
    """

    path: str
    source: str
    lines: list[tuple[int, str]]
    conflict: bool
    kind: str = "patch"

    def describe(self, record: str) -> str:
        """One sentence for the report's notes: the path, the record, the lines."""
        if self.lines and self.lines[0][0] == 0:
            shown = "the binary file upstream changed"
        else:
            shown = ", ".join(f"{n} {text!r}" for n, text in self.lines[:SHOWN_LINES])
            if len(self.lines) > SHOWN_LINES:
                shown += f" and {len(self.lines) - SHOWN_LINES} more"
            where = "the pin's" if self.kind == "resolution" else "the forked layer's"
            shown = (
                f"{len(self.lines)} upstream line(s) (lines of {where} file: {shown})"
            )
        if self.kind == "resolution":
            return (
                f"{self.path}: {record} changes or drops {shown}: in the fork delta's "
                "conflict regions it holds the overlay's lines; check that the overlay's "
                "copy was not made before upstream wrote them"
            )
        why = (
            f"the overlay's change against {self.source} does not merge onto the pin's "
            "file, so the patch is the whole file"
            if self.conflict
            else f"the overlay's change against {self.source} deletes them"
        )
        return (
            f"{self.path}: {record} removes {shown} ({why}); check them, and keep "
            "upstream's lines by editing the patch where they should stay"
        )


@dataclasses.dataclass
class CarriedFiles:
    """What carrying the overlay's files onto the forked layer gave.

    Attributes:
        target: the tree the imported records make (the pin with each overlay file's
            change carried onto it; the whole file where the carry conflicts or the
            copy's base is unknown).
        carried: path -> what its copy was made from, for every path whose target
            file differs from the overlay's own (upstream's later lines kept).
        conflicts: paths whose carry conflicted (the whole overlay file is used).
        sources: path -> what its copy was made from, for every path carried or tried.
    """

    target: str
    carried: dict[str, str]
    conflicts: list[str]
    sources: dict[str, str]


def copy_sources(
    store: Store,
    paths: Sequence[str],
    *,
    fork_tree: str,
    base_tree: str,
    fork_carried: set[str],
) -> dict[str, tuple[TreeEntry, str]]:
    """The file each overlay path was copied from: path -> ``(entry, words)``.

    A path whose fork change the forked layer carries was copied from the fork commit
    (the copy is the fork's file plus local fixes); any other from the fork's merge
    base (a core file the fork does not touch: MLX's file as the fork had it). A path
    missing there has no known base and is left out (its overlay file is used whole).

    Args:
        store: the git store; paths: the paths to find a base for.
        fork_tree, base_tree: the trees of the fork commit and the merge base.
        fork_carried: the fork-delta paths the forked layer carries.
    Returns:
        path -> ``(the base's tree entry, FROM_FORK or FROM_BASE)``; blobs only.
    """
    forked_paths = [p for p in paths if p in fork_carried]
    base_paths = [p for p in paths if p not in fork_carried]
    out: dict[str, tuple[TreeEntry, str]] = {}
    for tree, chosen, words in (
        (fork_tree, forked_paths, FROM_FORK),
        (base_tree, base_paths, FROM_BASE),
    ):
        for path, entry in store.entries(tree, chosen).items():
            if entry.kind == "blob":
                out[path] = (entry, words)
    return out


def carry_files(
    store: Store,
    forked: str,
    whole: str,
    paths: Sequence[str],
    sources: dict[str, tuple[TreeEntry, str]],
) -> CarriedFiles:
    """Carry each overlay file's change against its copy's base onto the forked layer.

    One merge-ort run (``git merge-tree``) over three trees that differ only at those
    paths: the base (the forked layer with each copy's base file), ours (the forked
    layer) and theirs (the base with the overlay's files). A clean path takes git's
    merge; a conflicted one the overlay's whole file.

    Args:
        store: the git store.
        forked: the forked layer's tree; whole: the pin with the overlay's files
            written over it.
        paths: the paths the forked layer holds and the overlay's file changes.
        sources: :func:`copy_sources`.
    Returns:
        :class:`CarriedFiles`.
    Raises:
        GitError: git merge-tree failed for another reason than a conflict.
    """
    tried = [p for p in paths if p in sources]
    if not tried:
        return CarriedFiles(whole, {}, [], {})
    wanted = store.entries(whole, tried)
    base = store.edit_tree(
        forked, {p: (sources[p][0].mode, sources[p][0].oid) for p in tried}
    )
    theirs = store.edit_tree(base, {p: (wanted[p].mode, wanted[p].oid) for p in tried})
    merge = store.merge_trees(
        base,
        forked,
        theirs,
        labels=(
            "overlay: the copy's base",
            "overlay: forked layer",
            "overlay: whole-file overlay",
        ),
    )
    merged = store.entries(merge.tree, tried)
    changes: dict[str, tuple[str, str] | None] = {}
    carried: dict[str, str] = {}
    for path in tried:
        entry = merged.get(path)
        if path in merge.stages or entry is None:
            continue
        if (entry.mode, entry.oid) != (wanted[path].mode, wanted[path].oid):
            changes[path] = (entry.mode, entry.oid)
            carried[path] = sources[path][1]
    return CarriedFiles(
        store.edit_tree(whole, changes),
        carried,
        sorted(p for p in tried if p in merge.stages),
        {p: sources[p][1] for p in tried},
    )


def _hunks(store: Store, old: str, new: str, paths: Sequence[str]) -> dict:
    """path -> the ``-U0`` hunks (or ``None`` for a binary file) of git's diff of two trees."""
    if not paths:
        return {}
    out = store.git(
        "-c",
        "diff.algorithm=myers",
        "diff-tree",
        "-r",
        "-p",
        "-U0",
        "--no-renames",
        "--full-index",
        "--no-color",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        old,
        new,
        "--",
        *paths,
    ).stdout
    found: dict = {}
    for piece in diff_pieces(out):
        if not piece.startswith(b"diff --git "):
            continue
        change = parse_file_diff(piece, 1, "the import's carry")
        found[change.path] = None if change.binary else change.hunks
    return found


def _lost_lines(
    store: Store, below: str, above: str, result: str, paths: Sequence[str]
) -> dict[str, list[tuple[int, str]]]:
    """path -> the lines ``above`` adds to ``below`` that ``result`` deletes again.

    Both diffs are git's (``-U0``); only their line numbers are compared here, and the
    text is ``above``'s. A binary file both diffs change is ``[(0, "binary file")]``.
    """
    added = _hunks(store, below, above, paths)
    deleted = _hunks(store, above, result, [p for p in paths if p in added])
    out: dict[str, list[tuple[int, str]]] = {}
    with store.cat_file() as cat:
        for path in sorted(deleted):
            ups, gone = added[path], deleted[path]
            if ups is None or gone is None:
                out[path] = [(0, "binary file")]
                continue
            new = {
                n
                for h in ups
                for n in range(h.target_start, h.target_start + h.target_length)
            }
            lost = sorted(
                n
                for h in gone
                for n in range(h.source_start, h.source_start + h.source_length)
                if n in new
            )
            if lost:
                text = cat.read(store.entries(above, [path])[path].oid)[1].split(b"\n")
                out[path] = [
                    (n, text[n - 1][:60].decode("utf-8", "replace")) for n in lost
                ]
    return out


def removed_upstream_lines(
    store: Store,
    forked: str,
    target: str,
    paths: Sequence[str],
    sources: dict[str, tuple[TreeEntry, str]],
    conflicts: Sequence[str],
) -> list[Removed]:
    """The upstream lines each imported patch deletes.

    An upstream line of a path is one the forked layer's file has and its copy's base
    lacks (git's diff from the base to the forked layer adds it: the pin's later work,
    or the fork's merge onto it); the patch removes it when git's diff from the forked
    layer to the target deletes that line.

    Args:
        store: the git store; forked, target: the layers the series goes between.
        paths: the paths the series changes that the forked layer holds.
        sources: :func:`copy_sources`; conflicts: the paths whose carry conflicted.
    Returns:
        One :class:`Removed` per path that loses an upstream line, by path.
    """
    known = [p for p in paths if p in sources]
    if not known:
        return []
    base = store.edit_tree(
        forked, {p: (sources[p][0].mode, sources[p][0].oid) for p in known}
    )
    return [
        Removed(path, sources[path][1], lines, path in conflicts)
        for path, lines in _lost_lines(store, base, forked, target, known).items()
    ]


def resolution_losses(
    store: Store, forked: str, stages: dict[str, dict[int, tuple[str, str]]]
) -> list[Removed]:
    """The pin's own lines (upstream's since the merge base) each resolution lacks.

    A resolution may choose anything inside git's conflict regions, and the import
    takes the overlay's lines there; a copy made before upstream moved on then drops
    upstream's side of the region without a word (LAY005 looks outside the regions
    only). Named in the report so the team can check them.

    Args:
        store: the git store; forked: the forked layer (with the resolutions).
        stages: the fork delta's conflicted paths and their stages.
    Returns:
        One :class:`Removed` (``kind`` ``resolution``) per path that loses one.
    """
    paths = sorted(p for p, st in stages.items() if 1 in st and 2 in st)
    if not paths:
        return []
    below = store.edit_tree(forked, {p: stages[p][1] for p in paths})
    pinned = store.edit_tree(forked, {p: stages[p][2] for p in paths})
    return [
        Removed(path, FROM_PIN, lines, True, kind="resolution")
        for path, lines in _lost_lines(store, below, pinned, forked, paths).items()
    ]
