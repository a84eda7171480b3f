"""``LOCAL_FIXES.md``: model, parser, validator and new-entry rendering.

The format is docs/design.md §7::

    # Local changes relative to NripeshN/mlx@75915908

    ## Retarget onto the MLX pin (39886de4)

    1. **Title.** Paragraph naming `mlx/backend/rocm/device.cpp`, possibly
       wrapped over several lines.

    ## Fixes to the fork's kernels
    ## Fixes to the fork's build
    ## Additions to the fork's API

    2. **Title.** ... <closing sentence from the manifest's [policy]>

    ## Dropped from the vendored set

    - `docs/some-dir/`, `setup.py`: why they are not carried.

Sections come in that order, each optional. Entries are numbered ``1..N``
across the whole file (order free across sections); the Dropped section holds
``- `` bullets only. An entry's paragraph ends at a blank line, a heading, or
the next entry or bullet; continuation lines may be indented or not.

Every check is a plain function returning ``list[Finding]`` (codes ``FIXnnn``,
documented in ``docs/findings.md``); they take plain inputs (strings, sets of
paths, :class:`PatchRecord` tuples), so ``overlay verify`` can feed them from git
and tests can feed them literals.

The package's modules, in the order the work flows:

* :mod:`~overlay.records.fixes.model` -- format constants, :data:`CODES`, the parsed shapes
  (:class:`Document`, :class:`Section`, :class:`Entry`, ...) and :class:`PatchRecord`;
* :mod:`~overlay.records.fixes.parser` -- :func:`parse` and :func:`load`;
* :mod:`~overlay.records.fixes.file` -- the file's bytes: :func:`fixes_bytes`,
  :func:`fixes_record`, :func:`write_fixes`;
* :mod:`~overlay.records.fixes.structure` -- checks of the document's shape (FIX001..FIX012,
  FIX026);
* :mod:`~overlay.records.fixes.wording` -- checks of what it says (FIX013..FIX016) and
  :func:`check_document`, which runs every textual check;
* :mod:`~overlay.records.fixes.cross_checks` -- checks against the series and the trees
  (FIX017..FIX025);
* :mod:`~overlay.records.fixes.new` -- ``overlay fix list`` and ``overlay fix new``;
* :mod:`~overlay.records.fixes.rewrite` -- what a completed rebase or sync rewrites in it (the
  headings' commits, the paths an entry names after a followed rename).

Callers import from the package (``from overlay.records import fixes; fixes.parse(...)``);
every name below is re-exported here, and imported from its module when first used
(:mod:`overlay.lazy`): a command that rewrites the headings loads the parser and the
rewrite, not the checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overlay.lazy import attach

if TYPE_CHECKING:
    from overlay.records.fixes.cross_checks import (
        ARTEFACT_DIRS,
        SOURCE_EXTENSIONS,
        check_dropped,
        check_patch_entries,
        check_resolutions,
        names_repository_path,
        patch_trailers,
        resolve_name,
    )
    from overlay.records.fixes.file import fixes_bytes, fixes_record, write_fixes
    from overlay.records.fixes.model import (
        BACKEND_PREFIX,
        CODES,
        ENTRY_SECTIONS,
        MAX_ENTRY_NUMBER,
        MLX_PREFIX,
        POLICY_SECTIONS,
        RETARGET_PREFIX,
        RETIRED,
        SECTION_HEADINGS,
        SECTION_ORDER,
        TITLE_PREFIX,
        Bullet,
        Document,
        Entry,
        Malformed,
        PatchRecord,
        Section,
    )
    from overlay.records.fixes.new import (
        PLACEHOLDER_BODY,
        PlannedEntry,
        add_entry,
        entry_policy,
        list_entries,
        next_number,
        plan_entry,
        render_new_entry,
    )
    from overlay.records.fixes.parser import (
        fork_repo_from_url,
        load,
        looks_like_path,
        parse,
    )
    from overlay.records.fixes.rewrite import rename_entry_paths, set_heading_pins
    from overlay.records.fixes.structure import (
        check_items,
        check_numbering,
        check_retarget_pin,
        check_sections,
        check_title,
    )
    from overlay.records.fixes.wording import (
        UPSTREAM_PATTERNS,
        check_closing_sentence,
        check_conflict_markers,
        check_document,
        check_upstream_marking,
        check_upstream_packages,
        ends_with_closing,
        find_conflict_markers,
        without_reference,
    )

# Each name is imported from its module when first used (overlay.lazy).
__getattr__, __dir__ = attach(
    __name__,
    {
        "ARTEFACT_DIRS": "cross_checks",
        "SOURCE_EXTENSIONS": "cross_checks",
        "check_dropped": "cross_checks",
        "check_patch_entries": "cross_checks",
        "check_resolutions": "cross_checks",
        "names_repository_path": "cross_checks",
        "patch_trailers": "cross_checks",
        "resolve_name": "cross_checks",
        "BACKEND_PREFIX": "model",
        "CODES": "model",
        "ENTRY_SECTIONS": "model",
        "MAX_ENTRY_NUMBER": "model",
        "MLX_PREFIX": "model",
        "POLICY_SECTIONS": "model",
        "RETARGET_PREFIX": "model",
        "RETIRED": "model",
        "SECTION_HEADINGS": "model",
        "SECTION_ORDER": "model",
        "TITLE_PREFIX": "model",
        "Bullet": "model",
        "Document": "model",
        "Entry": "model",
        "Malformed": "model",
        "PatchRecord": "model",
        "Section": "model",
        "PLACEHOLDER_BODY": "new",
        "PlannedEntry": "new",
        "add_entry": "new",
        "entry_policy": "new",
        "list_entries": "new",
        "next_number": "new",
        "plan_entry": "new",
        "render_new_entry": "new",
        "fixes_bytes": "file",
        "fixes_record": "file",
        "fork_repo_from_url": "parser",
        "load": "parser",
        "looks_like_path": "parser",
        "parse": "parser",
        "write_fixes": "file",
        "rename_entry_paths": "rewrite",
        "set_heading_pins": "rewrite",
        "check_items": "structure",
        "check_numbering": "structure",
        "check_retarget_pin": "structure",
        "check_sections": "structure",
        "check_title": "structure",
        "UPSTREAM_PATTERNS": "wording",
        "check_closing_sentence": "wording",
        "check_conflict_markers": "wording",
        "check_document": "wording",
        "check_upstream_marking": "wording",
        "check_upstream_packages": "wording",
        "ends_with_closing": "wording",
        "find_conflict_markers": "wording",
        "without_reference": "wording",
    },
)

__all__ = [
    "rename_entry_paths",
    "set_heading_pins",
    "ARTEFACT_DIRS",
    "BACKEND_PREFIX",
    "CODES",
    "ENTRY_SECTIONS",
    "MAX_ENTRY_NUMBER",
    "MLX_PREFIX",
    "PLACEHOLDER_BODY",
    "POLICY_SECTIONS",
    "RETARGET_PREFIX",
    "RETIRED",
    "SECTION_HEADINGS",
    "SECTION_ORDER",
    "SOURCE_EXTENSIONS",
    "TITLE_PREFIX",
    "UPSTREAM_PATTERNS",
    "Bullet",
    "Document",
    "Entry",
    "Malformed",
    "PatchRecord",
    "PlannedEntry",
    "Section",
    "add_entry",
    "check_closing_sentence",
    "check_conflict_markers",
    "check_document",
    "check_dropped",
    "check_items",
    "check_numbering",
    "check_patch_entries",
    "check_resolutions",
    "check_retarget_pin",
    "check_sections",
    "check_title",
    "check_upstream_marking",
    "check_upstream_packages",
    "ends_with_closing",
    "entry_policy",
    "find_conflict_markers",
    "fixes_bytes",
    "fixes_record",
    "fork_repo_from_url",
    "list_entries",
    "load",
    "looks_like_path",
    "names_repository_path",
    "next_number",
    "parse",
    "patch_trailers",
    "plan_entry",
    "render_new_entry",
    "resolve_name",
    "without_reference",
    "write_fixes",
]
