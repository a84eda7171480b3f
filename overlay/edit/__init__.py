"""The quilt-like loop: ``overlay edit`` prepares a work tree, ``overlay record`` writes the patch.

quilt users know ``quilt new``/``quilt edit``/``quilt refresh``/``quilt header -e``;
here it is two commands:

* :func:`start_edit` makes ``.overlay/edit/<stem>/``, an ordinary git checkout of
  the layer the patch is made on: for a new patch, the patched layer (or the layer
  up to ``--after PATCH``); for an existing patch, the layer below it *with the
  patch applied*, so the user edits the patch's result. The checkout has two
  commits (the layer below, then the patch) so ``git diff`` there shows the edit
  since ``overlay edit`` and ``git diff HEAD~1`` the whole patch. Its objects are
  borrowed from the git store (``objects/info/alternates``): nothing is copied.
* :func:`~overlay.edit.record.record` turns the work tree into the patch file,
  byte-stable exactly as ``overlay refresh`` would write it, with ``Local-Fix: N`` (a
  new entry planned by :func:`overlay.records.fixes.plan_entry`, the code of ``overlay
  fix new``, or a named one) and ``Forwarded:``; a new patch's series line goes after
  the patch it was made on. Patches later in the series are checked on the new tree:
  exactly when they still sit on their recorded pre-images, else carried by the
  engine's merge-ort cherry-pick (:func:`overlay.engine.refresh.carry_series`) and
  rewritten; a conflict refuses the record and writes nothing.

Every check runs before the first write; then a journal of the record is committed
(``.overlay/record-journal/``, :mod:`overlay.edit.writes`), the files are written
temp + rename, the edit is ended, and the journal goes last. A record killed after
the commit point is completed by the next ``record``, ``edit`` or ``edit --abort``
(:func:`complete_interrupted`), so the records end exactly as before or exactly as
recorded, with one entry; an error while writing puts back what was already written.
One edit at a time per repository; ``.overlay/edit.json`` says which, and the
records' lock (``.overlay/rebase.lock``) keeps two commands from racing; a rebase or
sync is not started while an edit is open (:func:`refuse_during_edit`).
"""

from typing import TYPE_CHECKING

from overlay.lazy import attach

if TYPE_CHECKING:
    from overlay.edit.finish import Completed, complete_interrupted, resume_record
    from overlay.edit.record import NothingToRecord, Recorded, wrap_message
    from overlay.edit.session import (
        Session,
        Started,
        load_session,
        patch_file_name,
        refuse_during_edit,
    )
    from overlay.edit.start import (
        Aborted,
        abort_edit,
        changed_files,
        show_edit,
        start_edit,
    )

# Each name is imported from its module when first used (overlay.lazy).
__getattr__, __dir__ = attach(
    __name__,
    {
        "Completed": "finish",
        "complete_interrupted": "finish",
        "resume_record": "finish",
        "NothingToRecord": "record",
        "Recorded": "record",
        "wrap_message": "record",
        "Session": "session",
        "Started": "session",
        "load_session": "session",
        "patch_file_name": "session",
        "refuse_during_edit": "session",
        "Aborted": "start",
        "abort_edit": "start",
        "changed_files": "start",
        "show_edit": "start",
        "start_edit": "start",
    },
)

__all__ = [
    "Aborted",
    "Completed",
    "NothingToRecord",
    "Recorded",
    "Session",
    "Started",
    "abort_edit",
    "changed_files",
    "complete_interrupted",
    "load_session",
    "patch_file_name",
    "refuse_during_edit",
    "resume_record",
    "show_edit",
    "start_edit",
    "wrap_message",
]
