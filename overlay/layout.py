"""Where things live in an overlay repository: every record and state path, named once.

Paths are relative to the repository root and written with ``/`` (as findings and
messages name them); :func:`under` joins one onto a root for the file system, and
:func:`make_state_dir` makes ``.overlay/``. Importing this module costs nothing: it
holds only names and those two.

Records (committed): the manifest, the series and its patches, the resolutions, the
suites, ``LOCAL_FIXES.md``. Per-clone state (git-ignored): everything under
``.overlay/`` -- the run state and lock, the last run's report, the rr-cache.
Build outputs: everything under ``build/``.
"""

from __future__ import annotations

import os

#: The records' directory: the manifest, the series and the patch files.
PATCH_DIR = "patches-rocm"
#: The manifest; the repository root is the directory holding it.
MANIFEST = f"{PATCH_DIR}/overlay.toml"
#: The series file: one patch name a line, in order.
SERIES = f"{PATCH_DIR}/series"
#: The resolutions of the fork delta's conflicts with the pin, one file per path.
RESOLVED_DIR = f"{PATCH_DIR}/resolved"
#: The concurrency suites' directory (``suites.toml`` and the children's sources).
SUITES_DIR = f"{PATCH_DIR}/suites"
#: The suites' definitions.
SUITES_TOML = f"{SUITES_DIR}/suites.toml"
#: The race lab's host-model sources.
RACELAB_DIR = f"{SUITES_DIR}/racelab"
#: The race lab's mutants (``overlay suite mutate``).
MUTANTS_TOML = f"{SUITES_DIR}/mutants.toml"
#: The fixes document.
LOCAL_FIXES = "LOCAL_FIXES.md"

#: This clone's state (locks, reports, rr-cache); never a record.
STATE_DIR = ".overlay"
#: The state of a rebase or sync in progress.
REBASE_STATE_DIR = f"{STATE_DIR}/rebase"
#: Inside it: the run's state, the records as they were before it (``--abort``
#: restores them), and the files a stop leaves for the user to edit.
STATE_JSON = "state.json"
BACKUP_JSON = "backup.json"
#: An older overlay's backup: a directory of copies (still read, never written).
BACKUP = "backup"
WORK = "work"
#: The run's state file.
REBASE_STATE = f"{REBASE_STATE_DIR}/{STATE_JSON}"
#: Where a stopped run's files are edited.
REBASE_WORK_DIR = f"{REBASE_STATE_DIR}/{WORK}"
#: A start builds the state directory here, then renames it to :data:`REBASE_STATE_DIR`.
REBASE_STATE_NEW = f"{REBASE_STATE_DIR}.tmp-new"
#: A run that ends (completed or aborted) renames its state directory here, then removes it.
REBASE_STATE_OLD = f"{REBASE_STATE_DIR}.tmp-old"
#: The lock of the rebase state and the records (outside the state directory, which
#: comes and goes).
REBASE_LOCK = f"{STATE_DIR}/rebase.lock"
#: Resolutions seen before, keyed on the conflict they resolved (as ``git rerere``).
RR_CACHE = f"{STATE_DIR}/rr-cache"
#: The team's shared rr-cache of patch-conflict resolutions: used only when it exists.
SHARED_RR_CACHE = f"{PATCH_DIR}/rr-cache"
#: ``verify``'s verdict cache.
VERIFY_CACHE = f"{STATE_DIR}/verify-cache"
#: The manifest's table as :mod:`tomllib` last read it, keyed on the manifest's bytes.
MANIFEST_CACHE = f"{STATE_DIR}/manifest-cache.json"
#: The series' patches as the parser last read them, keyed on each file's bytes.
SERIES_CACHE = f"{STATE_DIR}/series-cache.json"
#: An ``overlay edit`` in progress: its checkout and its state.
EDIT_DIR = f"{STATE_DIR}/edit"
EDIT_STATE = f"{STATE_DIR}/edit.json"
#: ``overlay record``'s journal: every record's bytes before it writes them (its
#: rollback), and the journal being made before it is renamed into place.
RECORD_JOURNAL = f"{STATE_DIR}/record-journal"
RECORD_JOURNAL_NEW = f"{RECORD_JOURNAL}.tmp-new"
#: The last completed rebase or sync, as JSON (its ``pins.before.pin`` is where it started).
LAST_REBASE_JSON = f"{STATE_DIR}/last-rebase.json"
#: The last completed rebase or sync, as Markdown.
LAST_REBASE_MD = f"{STATE_DIR}/last-rebase.md"
#: The last import's report.
LAST_IMPORT_MD = f"{STATE_DIR}/last-import.md"

#: Build outputs (git-ignored).
BUILD_DIR = "build"
#: The glob of the export directories ``overlay build`` writes (``build/<backend>/src``).
EXPORTS_GLOB = f"{BUILD_DIR}/*/src"
#: The suites' results root.
SUITE_RESULTS_DIR = f"{BUILD_DIR}/suite-results"
#: The race lab's builds (``build/race-lab/<label>``).
RACE_LAB_BUILDS = f"{BUILD_DIR}/race-lab"
#: Inside a backend's build directory (``build/<backend>/``): the exported tree,
#: CMake's build of MLX, and the suite children built against it.
BACKEND_SRC = "src"
BACKEND_OBJ = "obj"
BACKEND_SUITES = "suites"

#: Inside an export directory (DEST): the export's stamp, its transaction record
#: (:mod:`overlay.export.stamp`), and the lock an export holds.
EXPORT_STAMP = ".overlay-export.json"
EXPORT_LOCK = ".overlay-export.lock"


def backend_dir(backend: str) -> str:
    """``build/<backend>``, where ``overlay build --backend BACKEND`` works."""
    return f"{BUILD_DIR}/{backend}"


def under(root: str, rel: str) -> str:
    """``rel`` (one of this module's ``/`` paths) joined onto ``root`` for the file system.

    Args:
        root: the repository root (or any directory).
        rel: a relative path written with ``/``.
    Returns:
        The joined path, with the platform's separator.
    """
    return os.path.join(root, *rel.split("/"))


def run_state_present(root: str) -> bool:
    """Whether ``<root>/.overlay/rebase/`` (a run's state directory) is there: the run
    state's modules need loading only then (``status``, ``edit``, ``record``).

    Args:
        root: the overlay repository.
    Returns:
        True when the directory (or a symlink to one) exists.
    """
    return os.path.isdir(under(root, REBASE_STATE_DIR))


#: The one line of ``.overlay/.gitignore`` that matters: everything in it.
STATE_GITIGNORE = "# made by overlay: this clone's state, never a record\n*\n"


def make_state_dir(root: str) -> str:
    """``<root>/.overlay``, made when absent, with a ``.gitignore`` of ``*`` in it (as a
    virtual environment or pytest's cache holds): ``git status`` of any repository then
    leaves the clone's state out, with no line in the repository's own ``.gitignore``.

    Args:
        root: the overlay repository.
    Returns:
        The directory's path.
    Raises:
        OSError: it cannot be made.
    """
    path = under(root, STATE_DIR)
    os.makedirs(path, exist_ok=True)
    try:
        with open(os.path.join(path, ".gitignore"), "x", encoding="utf-8") as fh:
            fh.write(STATE_GITIGNORE)
    except FileExistsError:
        pass
    return path
