"""The codes of ``overlay verify``'s MAN, SER and LAY families, and their findings.

The FIX family's codes live in :data:`overlay.records.fixes.CODES`; what each code means is
documented in ``docs/findings.md``.
"""

from __future__ import annotations

from overlay.checks.findings import Finding

#: code -> (severity, meaning); the FIX family lives in :data:`overlay.records.fixes.CODES`.
CODES: dict[str, tuple[str, str]] = {
    "MAN001": (
        "error",
        "a manifest commit is not in the git store and cannot be fetched",
    ),
    "MAN002": (
        "warning",
        "offline and the pinned objects are not in the git store: layer checks skipped",
    ),
    "MAN003": ("error", "the fork's merge base is not an ancestor of the fork commit"),
    "MAN004": (
        "error",
        "the fork commit holds upstream commits that the pin lacks: they are carried as "
        "fork delta",
    ),
    "MAN005": (
        "info",
        "the fork changed paths the overlay does not carry since the commit whose such "
        "changes were last reviewed",
    ),
    "SER001": ("error", "series lists a patch file that does not exist"),
    "SER002": ("error", "a patch file in patches-rocm/ is not listed in series"),
    "SER003": ("error", "series lists the same patch twice"),
    "SER004": ("error", "a patch cannot be parsed, or names an unsafe path"),
    "SER005": ("error", "a patch has no subject"),
    "SER006": ("error", "a patch has no description"),
    "SER007": ("error", "a patch touches a path the manifest does not carry"),
    "SER008": (
        "error",
        "an index line is not full 40-hex (the 3-way fallback needs the pre-image blob name)",
    ),
    "SER010": (
        "error",
        "a patch does not apply on its recorded pre-image, or git's result is not its "
        "recorded post-image",
    ),
    "SER011": ("error", "refreshing the patch would change its bytes"),
    "SER013": ("error", "a conflict marker in a patch's added lines"),
    "SER014": (
        "error",
        "the series or a patch is refused as a record (symlink, not a regular file, "
        "over 16 MiB, unreadable, or a series that is not UTF-8)",
    ),
    "SER015": (
        "error",
        "a text diff holds a NUL byte, or refreshing would turn it into a `GIT binary patch`",
    ),
    "SER016": (
        "error",
        "a patch adds or changes a symlink that points outside the tree (export refuses it)",
    ),
    "SER017": (
        "error",
        "a patch's recorded blob cannot be found: a full `index` name the git store "
        "lacks, an abbreviation of no blob or of several, or no `index` line at all: "
        "the patch is unverifiable",
    ),
    "SER018": (
        "error",
        "a patch lacks its mail head's mbox `From <sha>` line or its `From:` author header",
    ),
    "LAY001": (
        "error",
        "the fork delta conflicts with the pin and no resolution exists",
    ),
    "LAY002": ("error", "a resolution whose path no longer conflicts (stale)"),
    "LAY003": ("error", "a conflict marker in a resolution file"),
    "LAY004": ("error", "a resolution for a path the manifest does not carry"),
    "LAY005": (
        "error",
        "a resolution changes lines outside the conflict regions of git's automatic merge",
    ),
    "LAY006": (
        "error",
        "a resolution is refused as a record (symlink, not a regular file, over 16 MiB, "
        "unreadable): layer checks skipped",
    ),
    "LAY007": (
        "error",
        "the patched tree holds a submodule (gitlink), which `overlay export` and so "
        "every build refuse to write",
    ),
}


#: Retired codes of the MAN, SER and LAY families -> what each meant. A code, once
#: released, never changes meaning: none of these may be declared in :data:`CODES`
#: again (``tests/test_checks_codes.py``); docs/findings.md lists them.
RETIRED: dict[str, str] = {
    "SER009": "warning: a hunk applies only at an offset",
    "SER012": "warning: a patch applies only by a 3-way merge from its pre-image",
}


#: The families, in report order.
FAMILIES = ("MAN", "SER", "LAY", "FIX")


def finding(
    code: str, path: str | None, line: int | None, message: str, hint: str | None = None
) -> Finding:
    """A :class:`~overlay.checks.findings.Finding` of ``code`` with the code's severity.

    Raises:
        KeyError: ``code`` is not in :data:`CODES`.
    """
    return Finding(code, CODES[code][0], path, line, message, hint)
