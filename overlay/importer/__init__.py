"""``overlay import whole-file DIR``: a whole-file overlay turned into records.

A team that keeps its ROCm overlay by hand holds, in DIR:

* ``UPSTREAM``: ``key: value`` lines naming the fork (``source``, ``branch``), the
  fork commit (``commit``), its merge base with MLX (``fork_upstream_merge_base``)
  and the MLX pin the files were retargeted to (``retargeted_to_mlx_pin``);
* ``LOCAL_FIXES.md``: the numbered entries;
* the overlay: whole files under ``mlx/`` and ``CMakeLists.txt``, copied over an
  MLX checkout at the pin.

The import writes into the target repository ``patches-rocm/overlay.toml`` (from
``UPSTREAM``), ``patches-rocm/resolved/``, the series of byte-stable patches, and
``LOCAL_FIXES.md`` carried over byte for byte. The rules (``docs/import.md``):

* the *target* is the pin's tree with each overlay file's change against the file
  it was copied from (the fork commit's, or the merge base's for a core file the fork
  does not touch) carried onto it by merge-ort, so upstream's later lines are kept
  (:mod:`~overlay.importer.carry`); where that carry conflicts, the overlay's whole
  file, and the report names the upstream lines the patch removes. The patched layer
  of the imported records must equal the target, and does before anything is written
  (the records are computed again from a temporary directory);
* the forked layer is the carried fork delta merged onto the pin with the layer
  code (:mod:`overlay.engine.forked`); a fork change that the target does not hold (the
  overlay has no file there, or the pin's) is not carried: its path joins
  ``[carry] exclude``, and so does nothing else;
* where the fork delta conflicts with the pin, the path gets a resolution: git's
  merge outside the conflict regions, the overlay's lines inside them; what the
  overlay changes outside them goes into a patch on top;
* every other file that differs from the forked layer goes into a patch. Files are
  grouped by the ``LOCAL_FIXES.md`` entries that name them: one patch per entry
  (``Local-Fix: N``); a file several entries name goes into one patch with a
  ``Local-Fix:`` trailer for each; a file no entry names gets a patch of its own
  without ``Local-Fix:`` (verify says so: FIX017). A file the forked layer lacks is
  created by its patch.

Patches are made the one way the project makes them: :func:`overlay.records.patchfmt.tree_diff`
and :func:`overlay.records.patchfmt.format_patch`, passed through
:func:`overlay.engine.refresh.refreshed_bytes`, so ``overlay refresh`` would not change a byte.

The package follows the import's steps (each module's names are re-exported here):

* :mod:`~overlay.importer.reading` -- the ``UPSTREAM`` record and the overlay directory;
* :mod:`~overlay.importer.planning` -- the plan: carried paths, resolutions, the series;
* :mod:`~overlay.importer.carry` -- each copy carried onto the pin; upstream lines removed;
* :mod:`~overlay.importer.patches` -- each imported patch's name and message;
* :mod:`~overlay.importer.rows` -- what each path became (the report's rows);
* :mod:`~overlay.importer.manifest_text` -- the manifest's defaults and TOML text;
* :mod:`~overlay.importer.writing` -- staging, the self-check, the renames under the lock;
* :mod:`~overlay.importer.reporting` -- the report as data, text, JSON and Markdown.
"""

from __future__ import annotations

import os

from overlay import layout
from overlay.errors import OverlayError
from overlay.fs.atomic import atomic_write
from overlay.git.store import Store
from overlay.importer.manifest_text import (
    DEFAULT_ARCHITECTURES,
    DEFAULT_EXCLUDE,
    DEFAULT_INCLUDE,
    DEFAULT_UPSTREAM_URL,
    render_manifest,
)
from overlay.importer.patches import PlannedPatch
from overlay.importer.planning import (
    ImportPlan,
    fork_url_of,
    infer_closing_sentence,
    plan_import,
    split_resolution,
)
from overlay.importer.reading import (
    TREE_NAMES,
    UPSTREAM_FILE,
    UPSTREAM_KEYS,
    Upstream,
    WholeFile,
    parse_upstream,
    read_whole_file,
)
from overlay.importer.reporting import (
    render,
    render_markdown,
    render_text,
    report_data,
)
from overlay.importer.rows import FileRow
from overlay.importer.writing import Written, write_import
from overlay.records.patchfmt import DEFAULT_AUTHOR


def import_whole_file(
    store: Store,
    target: str,
    directory: str,
    *,
    force: bool = False,
    upstream_url: str = DEFAULT_UPSTREAM_URL,
    fork_url: str | None = None,
    closing_sentence: str | None = None,
    author: str = DEFAULT_AUTHOR,
) -> dict:
    """``overlay import whole-file``: read, plan, write, verify; the report as data.

    Args:
        store: the git store.
        target: the repository to write into (made an overlay repository).
        directory: the whole-file overlay.
        force, upstream_url, fork_url, closing_sentence, author: see
            :func:`write_import` and :func:`plan_import`.
    Returns:
        :func:`report_data` with ``overlay verify``'s findings on the written records;
        the Markdown report is also written to ``.overlay/last-import.md``.
    Raises:
        OverlayError: as :func:`read_whole_file`, :func:`plan_import` and
            :func:`write_import` (nothing is written then; exit 2).
    """
    # looked up per run: the import tests replace checks.verify.verify
    from overlay.checks.verify import verify
    from overlay.workspace import Workspace

    whole = read_whole_file(directory)
    if not os.path.isdir(target):
        raise OverlayError(f"{target}: no such directory")
    plan = plan_import(
        store,
        whole,
        upstream_url=upstream_url,
        fork_url=fork_url,
        closing_sentence=closing_sentence,
        author=author,
    )
    written = write_import(store, target, plan, force=force)
    findings = verify(Workspace.of(os.path.abspath(target), store)).findings
    report = report_data(
        plan, directory=directory, findings=findings, backup=written.backup
    )
    try:
        atomic_write(
            os.path.join(target, layout.LAST_IMPORT_MD),
            render_markdown(report).encode("utf-8"),
        )
    except OSError:
        pass  # the report is also printed; a read-only .overlay/ costs only the copy
    return report


__all__ = [
    "DEFAULT_ARCHITECTURES",
    "DEFAULT_EXCLUDE",
    "DEFAULT_INCLUDE",
    "DEFAULT_UPSTREAM_URL",
    "TREE_NAMES",
    "UPSTREAM_FILE",
    "UPSTREAM_KEYS",
    "FileRow",
    "ImportPlan",
    "PlannedPatch",
    "Upstream",
    "WholeFile",
    "Written",
    "fork_url_of",
    "import_whole_file",
    "infer_closing_sentence",
    "parse_upstream",
    "plan_import",
    "read_whole_file",
    "render",
    "render_manifest",
    "render_markdown",
    "render_text",
    "report_data",
    "split_resolution",
    "write_import",
]
