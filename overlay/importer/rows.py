"""What each path of the overlay became: the rows of the import report."""

import dataclasses

from overlay import layout
from overlay.importer.patches import PlannedPatch, numbers_text
from overlay.importer.reading import WholeFile


@dataclasses.dataclass
class FileRow:
    """What one path became (a row of the report).

    Attributes:
        path: tree path, or for ``skipped`` a name in DIR.
        kind: ``unchanged``, ``resolution``, ``patch``, ``created``, ``dropped``,
            ``ignored`` or ``skipped``.
        result: the record that holds it, in words.
        entries: the ``LOCAL_FIXES.md`` entries that name it.
        note: why, when the kind alone does not say.
    """

    path: str
    kind: str
    result: str
    entries: tuple[int, ...] = ()
    note: str = ""


def file_rows(
    whole: WholeFile,
    differs: set[str],
    dropped: set[str],
    resolutions: dict[str, bytes],
    patches: list[PlannedPatch],
    named_by: dict[str, set[int]],
    changed: list[str],
    partial: list[str],
) -> list[FileRow]:
    """One row per overlay file, dropped fork change, ignored or skipped name."""
    patch_of = {p: patch for patch in patches for p in patch.files}
    changed_set = set(changed)
    rows = []
    for path in sorted(whole.files):
        entries = tuple(sorted(named_by.get(path, ())))
        patch = patch_of.get(path)
        if path in dropped:
            rows.append(
                FileRow(
                    path,
                    "dropped",
                    "not carried ([carry] exclude)",
                    entries,
                    "the overlay holds the pin's file; the fork's change to it is not carried",
                )
            )
        elif path not in differs:
            rows.append(
                FileRow(path, "unchanged", "the pin's file", entries, "equals the pin")
            )
        elif path in resolutions:
            result = f"{layout.RESOLVED_DIR}/{path}"
            note = "the fork delta conflicts with the pin here"
            if patch is not None:
                result += f" + {patch.name}"
                note += "; the overlay's changes outside the conflict regions are in the patch"
            rows.append(FileRow(path, "resolution", result, entries, note))
        elif path not in changed_set:
            rows.append(
                FileRow(
                    path,
                    "unchanged",
                    "the forked layer's file",
                    entries,
                    "equals the fork delta carried onto the pin",
                )
            )
        else:
            assert patch is not None
            kind = "created" if path in patch.created else "patch"
            if len(patch.local_fix) > 1:
                entries_text = numbers_text(patch.local_fix)
                note = f"named by entries {entries_text}: one patch for all of them"
            elif not patch.local_fix:
                note = "named by no entry: the patch has no Local-Fix trailer"
            else:
                note = ""
            if kind == "created":
                note = "absent from the fork and the pin" + (
                    f"; {note}" if note else ""
                )
            rows.append(FileRow(path, kind, patch.name, entries, note))
    for path in sorted(dropped - set(whole.files)):
        rows.append(
            FileRow(
                path,
                "dropped",
                "not carried ([carry] exclude)",
                (),
                "the fork changes it; the overlay does not hold it",
            )
        )
    for path in whole.ignored:
        rows.append(
            FileRow(
                path,
                "ignored",
                "not imported",
                (),
                "git ignores it in the overlay directory",
            )
        )
    for name in whole.outside:
        rows.append(
            FileRow(
                name, "skipped", "not imported", (), "not under mlx/ or CMakeLists.txt"
            )
        )
    return rows
