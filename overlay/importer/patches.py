"""The imported series: each patch's name, subject and description."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Sequence


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
            f"Imported from a whole-file overlay: LOCAL_FIXES.md entries {numbers_text(key)} each name "
            f"{listed} ({'; '.join(titles[n] for n in key)}). The whole-file copy does not say which "
            "lines belong to which entry, so one patch carries them all."
        )
    else:
        verb = "Add" if files[0] in created else "Change"
        subject = f"{verb} {files[0]}"
        text = (
            f"Imported from a whole-file overlay: no LOCAL_FIXES.md entry names {listed}, so this patch "
            "has no Local-Fix trailer. Add an entry that says why, and its number here."
        )
    for path in files:
        if path in partial:
            text += (
                f" The fork delta conflicts with the pin in `{path}`: "
                f"patches-rocm/resolved/{path} holds git's merge with the overlay's lines in the conflict "
                "regions; this patch holds what the overlay changes outside them."
            )
    return subject, wrap_text(text)
