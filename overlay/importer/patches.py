"""The imported series: each patch's name, subject and description."""

import dataclasses
import re
import textwrap
from collections.abc import Sequence

from overlay import layout
from overlay.git.store import Store, TreeEntry
from overlay.records import fixes
from overlay.records.patchfmt import format_patch, tree_diff


@dataclasses.dataclass
class PlannedPatch:
    """One patch of the imported series.

    Attributes:
        name: file name in ``patches-rocm/``.
        local_fix: the entry numbers of its ``Local-Fix:`` trailers (empty: none names it).
        files: the tree paths it changes; ``created``: those it creates.
        data: the patch file's bytes.
    """

    name: str
    local_fix: tuple[int, ...]
    files: list[str]
    created: list[str]
    data: bytes


def patch_slug(text: str, limit: int = 48) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(slug) > limit:
        slug = slug[:limit].rsplit("-", 1)[0]
    return slug or "import"


def numbers_text(key: Sequence[int]) -> str:
    names = [str(n) for n in key]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def wrap_text(text: str) -> str:
    return textwrap.fill(
        " ".join(text.split()), 72, break_long_words=False, break_on_hyphens=False
    )


def patch_message(
    key: tuple[int, ...],
    files: list[str],
    titles: dict[int, str],
    created: set[str],
    partial: list[str],
) -> tuple[str, str]:
    """The subject and description of an imported patch."""
    listed = ", ".join(f"`{p}`" for p in files)
    if len(key) == 1:
        subject = titles[key[0]]
        text = (
            f"Imported from a whole-file overlay: the change to {listed} that LOCAL_FIXES.md entry "
            f"{key[0]} describes."
        )
    elif key:
        subject = f"Local fixes {numbers_text(key)}: " + ", ".join(
            p.rsplit("/", 1)[-1] for p in files
        )
        text = (
            "Imported from a whole-file overlay: LOCAL_FIXES.md entries "
            f"{numbers_text(key)} each name {listed} "
            f"({'; '.join(titles[n] for n in key)}). The whole-file copy does not say "
            "which lines belong to which entry, so one patch carries them all."
        )
    else:
        verb = "Add" if files[0] in created else "Change"
        subject = f"{verb} {files[0]}"
        text = (
            "Imported from a whole-file overlay: no LOCAL_FIXES.md entry names "
            f"{listed}, so this patch has no Local-Fix trailer. Add an entry that says "
            "why, and its number here."
        )
    for path in files:
        if path in partial:
            text += (
                f" The fork delta conflicts with the pin in `{path}`: "
                f"{layout.RESOLVED_DIR}/{path} holds git's merge with the overlay's lines "
                "in the conflict regions; this patch holds what the overlay changes "
                "outside them."
            )
    return subject, wrap_text(text)


def entries_by_path(
    store: Store, target: str, doc: fixes.Document
) -> tuple[dict[str, set[int]], dict[int, str]]:
    """``(tree path -> numbers of the entries naming it, entry number -> title)``.

    A name an entry gives is matched against the target tree's paths
    (:func:`overlay.records.fixes.resolve_name`); one that matches several paths names none.
    """
    paths = {e[3] for e in store.ls_tree(target)}
    bases: dict[str, list[str]] = {}
    for p in paths:
        bases.setdefault(p.rsplit("/", 1)[-1], []).append(p)
    named_by: dict[str, set[int]] = {}
    titles: dict[int, str] = {}
    for e in doc.entries():
        titles.setdefault(e.number, e.title)
        for name in e.files:
            # A resolution's path (patches-rocm/resolved/...) names the resolution, not
            # the file: a patch pointing at that entry would be FIX020.
            cands = fixes.resolve_name(name, paths, bases)
            if len(cands) == 1:
                named_by.setdefault(cands[0], set()).add(e.number)
    return named_by, titles


def group_by_entries(
    changed: Sequence[str], named_by: dict[str, set[int]]
) -> list[tuple[tuple[int, ...], list[str]]]:
    """The patches to make: ``(entry numbers, paths)``, one per set of naming entries in
    number order, then one per path no entry names (``()``), by path."""
    groups: dict[tuple[int, ...], list[str]] = {}
    alone: list[str] = []
    for path in changed:
        key = tuple(sorted(named_by.get(path, ())))
        if key:
            groups.setdefault(key, []).append(path)
        else:
            alone.append(path)
    return [(k, groups[k]) for k in sorted(groups)] + [((), [p]) for p in sorted(alone)]


def build_series(
    store: Store,
    forked: str,
    wanted: dict[str, TreeEntry],
    ordered: Sequence[tuple[tuple[int, ...], list[str]]],
    *,
    titles: dict[int, str],
    created: set[str],
    partial: list[str],
    author: str,
) -> tuple[list[PlannedPatch], str]:
    """The series that takes the forked layer to the wanted files, patch by patch.

    Args:
        store: the git store; forked: the forked layer's tree.
        wanted: tree path -> the target's entry, for every changed path.
        ordered: :func:`group_by_entries`.
        titles, created, partial: entry titles, the paths the series creates, the
            conflicted paths whose patch holds the changes outside the regions.
        author: the ``From:`` header.
    Returns:
        ``(patches, the tree after the last one)``.
    """
    patches: list[PlannedPatch] = []
    tree = forked
    for index, (key, files) in enumerate(ordered, 1):
        after = store.edit_tree(
            tree, {p: (wanted[p].mode, wanted[p].oid) for p in files}
        )
        diff = tree_diff(store, tree, after)
        subject, description = patch_message(key, files, titles, created, partial)
        trailers = [("Local-Fix", str(n)) for n in key] + [("Forwarded", "not-needed")]
        data = format_patch(subject, description, trailers, diff, author)
        slug = patch_slug(
            titles[key[0]]
            if len(key) == 1
            else f"fixes {'-'.join(map(str, key))}"
            if key
            else files[0].rsplit("/", 1)[-1]
        )
        patches.append(
            PlannedPatch(
                f"{index:04d}-{slug}.patch",
                key,
                list(files),
                sorted(set(files) & created),
                data,
            )
        )
        tree = after
    return patches, tree
