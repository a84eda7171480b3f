"""``overlay fix list`` and ``overlay fix new``: entries as rows, the next free
number, a new entry rendered into the file (:func:`render_new_entry`), planned
(:func:`plan_entry`, as ``overlay record`` uses it) or written (:func:`add_entry`).
"""

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from overlay.errors import OverlayError
from overlay.fs.atomic import atomic_write
from overlay.records.fixes.model import (
    ENTRY_SECTIONS,
    MAX_ENTRY_NUMBER,
    POLICY_SECTIONS,
    RETARGET_PREFIX,
    SECTION_HEADINGS,
    SECTION_ORDER,
    TITLE_PREFIX,
    Document,
    PatchRecord,
)
from overlay.records.fixes.parser import fork_repo_from_url, load, parse
from overlay.report.templating import render_template

PLACEHOLDER_BODY = (
    "TODO: say what was wrong, what this fix changes, and which suite "
    "or test proves it."
)


def list_entries(
    doc: Document, patches: Iterable[PatchRecord | tuple] = ()
) -> list[dict]:
    """Entries as rows for ``overlay fix list``.

    Args:
        doc: parsed document.
        patches: optional patch records; each entry gets the paths of the
            patches whose ``Local-Fix`` is its number.

    Returns:
        ``[{"number", "title", "section", "line", "files": [..], "patches": [..]}]``
        in document order.
    """
    by_n: dict[int, list[str]] = {}
    for p in patches:
        p = p if isinstance(p, PatchRecord) else PatchRecord(*p)
        for value in (
            p.local_fix if isinstance(p.local_fix, (list, tuple)) else [p.local_fix]
        ):
            try:
                by_n.setdefault(int(str(value)), []).append(p.path)
            except ValueError:
                continue
    return [
        {
            "number": e.number,
            "title": e.title,
            "section": e.section,
            "line": e.line,
            "files": list(e.files),
            "patches": by_n.get(e.number, []),
        }
        for e in doc.entries()
    ]


def next_number(doc: Document) -> int:
    """The next free entry number: highest number + 1 (1 for an empty file).

    Numbers above :data:`MAX_ENTRY_NUMBER` (a FIX007 typo) are not counted.
    """
    return (
        max(
            (e.number for e in doc.entries() if e.number <= MAX_ENTRY_NUMBER), default=0
        )
        + 1
    )


def _heading_for(section: str, pin: str | None) -> str:
    """The ``##`` heading line that opens a missing section."""
    if section == "retarget":
        if not pin:
            raise OverlayError(
                "the retarget section is missing and no pin was given to name it"
            )
        return f"## {RETARGET_PREFIX} ({pin.lower()[:8]})"
    return "## " + SECTION_HEADINGS[section]


def render_new_entry(
    doc: Document,
    section: str,
    title: str,
    files: Sequence[str],
    body: str | None = None,
    *,
    closing_sentence: str | None = None,
    pin: str | None = None,
) -> tuple[str, int]:
    """Render ``doc`` with a new entry appended to ``section`` (for ``overlay fix new``).

    The entry comes from ``overlay/templates/fix_entry.md.j2``: ``N. **Title.**``,
    the body (or a TODO placeholder sentence), the files in backticks, and for the
    kernels/build/API sections the closing sentence, wrapped to 88 columns with a
    3-space continuation indent. It goes after the last item of its section; a
    missing section is created in :data:`SECTION_ORDER` position.

    Args:
        doc: the parsed current document.
        section: ``"retarget"``, ``"kernels"``, ``"build"`` or ``"api"``.
        title: entry title (a final period is added if missing).
        files: paths the entry names (repo-relative or backend-relative).
        body: the paragraph; default a placeholder sentence to replace.
        closing_sentence: the manifest's ``[policy] closing-sentence`` (required
            for kernels/build/API).
        pin: the manifest's pin, needed only to create a missing retarget section.

    Returns:
        ``(new document text, entry number)``.

    Raises:
        OverlayError: unknown section, empty title, title or file with a backtick
            or newline, missing closing sentence, or a retarget section to create
            without a pin.
    """
    if section not in ENTRY_SECTIONS:
        raise OverlayError(
            f"unknown section {section!r}",
            hint="use one of: " + ", ".join(ENTRY_SECTIONS),
        )
    title = " ".join(title.split()).rstrip(".")
    if not title or "*" in title:
        raise OverlayError("the title must be non-empty and contain no '*'")
    for f in files:
        if not f or "`" in f or any(c.isspace() for c in f):
            raise OverlayError(f"bad file name {f!r}")
    if section in POLICY_SECTIONS and not closing_sentence:
        raise OverlayError(
            "no closing sentence: [policy] closing-sentence is missing from the manifest"
        )
    number = next_number(doc)
    entry = render_template(
        "fix_entry.md.j2",
        number=number,
        title=title,
        files=list(files),
        body=" ".join((body or PLACEHOLDER_BODY).split()),
        closing=closing_sentence if section in POLICY_SECTIONS else None,
    ).rstrip("\n")

    lines = doc.text.splitlines()
    nl = "\r\n" if "\r\n" in doc.text else "\n"
    sec = doc.section(section)
    if sec is not None:
        end = sec.end_line
        while end > sec.line and not lines[end - 1].strip():
            end -= 1
        rest = lines[end:]
        new_lines = (
            lines[:end]
            + [""]
            + entry.split("\n")
            + ([""] if rest and rest[0].strip() else [])
            + rest
        )
    else:
        idx = SECTION_ORDER.index(section)
        block = [_heading_for(section, pin), ""] + entry.split("\n")
        after = next(
            (
                s
                for s in doc.sections
                if s.key in SECTION_ORDER and SECTION_ORDER.index(s.key) > idx
            ),
            None,
        )
        if after is not None:
            at = after.line - 1
            new_lines = lines[:at] + block + [""] + lines[at:]
        else:
            end = len(lines)
            while end > 0 and not lines[end - 1].strip():
                end -= 1
            new_lines = lines[:end] + ([""] if end else []) + block
    text = nl.join(new_lines)
    if not text.endswith(nl):
        text += nl
    check = parse(text, doc.path)
    found = [e for e in check.entries() if e.number == number]
    if len(found) != 1 or found[0].section != section:
        raise OverlayError(
            f"internal: the rendered entry {number} does not parse back into {section}"
        )
    return text, number


@dataclasses.dataclass(frozen=True)
class PlannedEntry:
    """A new entry rendered into the whole file, not yet written (see :func:`plan_entry`).

    Attributes:
        path: the file to write (a symlink resolved, so the link stays a link).
        text: the file's new content.
        number: the new entry's number.
    """

    path: str
    text: str
    number: int

    def write(self) -> None:
        """Write :attr:`text` to :attr:`path` (temp + rename).

        Raises:
            OverlayError: the file cannot be written (exit 2).
        """
        try:
            atomic_write(self.path, self.text.encode("utf-8"))
        except OSError as exc:
            raise OverlayError(
                f"cannot write {os.path.basename(self.path)}: {exc.strerror or exc}"
            ) from None


def entry_policy(manifest) -> dict:
    """The manifest's values a new entry needs, as keyword arguments of :func:`plan_entry`
    and :func:`add_entry` (``overlay fix new`` and ``overlay record`` both pass these).

    Args:
        manifest: the :class:`overlay.records.manifest.Manifest`.
    Returns:
        ``{"closing_sentence", "pin", "fork_repo", "fork_commit"}``.
    """
    return {
        "closing_sentence": manifest.closing_sentence,
        "pin": manifest.pin,
        "fork_repo": fork_repo_from_url(manifest.fork_url),
        "fork_commit": manifest.fork_commit,
    }


def plan_entry(
    path: str | os.PathLike,
    section: str,
    title: str,
    files: Sequence[str],
    body: str | None = None,
    *,
    closing_sentence: str | None = None,
    pin: str | None = None,
    fork_repo: str | None = None,
    fork_commit: str | None = None,
) -> PlannedEntry:
    """The file at ``path`` with a new entry, rendered but not written.

    ``overlay record`` plans the entry with every other record it writes, so a
    failure before the first write leaves ``LOCAL_FIXES.md`` untouched; ``overlay
    fix new`` (:func:`add_entry`) writes it at once. A missing file is started with
    the title (needs ``fork_repo`` and ``fork_commit``).

    Args:
        path: the ``LOCAL_FIXES.md`` to update.
        section, title, files, body, closing_sentence, pin: as :func:`render_new_entry`.
        fork_repo, fork_commit: title parts for a new file.

    Returns:
        :class:`PlannedEntry`.

    Raises:
        OverlayError: as :func:`render_new_entry`, or the file cannot be read.
    """
    p = Path(path)
    bom = ""
    if p.exists():
        doc = load(p)
        with open(p, "rb") as fh:
            # The document is read without its byte-order mark; the file keeps it.
            bom = "\ufeff" if fh.read(3) == b"\xef\xbb\xbf" else ""
    else:
        if not (fork_repo and fork_commit):
            raise OverlayError(
                f"{p.name} does not exist and no fork repo/commit was given for its title"
            )
        doc = parse(f"# {TITLE_PREFIX}{fork_repo}@{fork_commit.lower()[:8]}\n")
    text, number = render_new_entry(
        doc, section, title, files, body, closing_sentence=closing_sentence, pin=pin
    )
    # Through a symlink (load refused one that leaves the repository), so the link stays a link.
    return PlannedEntry(os.path.realpath(p), bom + text, number)


def add_entry(
    path: str | os.PathLike,
    section: str,
    title: str,
    files: Sequence[str],
    body: str | None = None,
    *,
    closing_sentence: str | None = None,
    pin: str | None = None,
    fork_repo: str | None = None,
    fork_commit: str | None = None,
) -> int:
    """``overlay fix new``: add an entry to the file at ``path`` (temp + rename).

    A missing file is started with the title (needs ``fork_repo`` and ``fork_commit``).

    Args:
        path: the ``LOCAL_FIXES.md`` to update.
        section, title, files, body, closing_sentence, pin: as :func:`render_new_entry`.
        fork_repo, fork_commit: title parts for a new file.

    Returns:
        The new entry's number.

    Raises:
        OverlayError: as :func:`render_new_entry`, or the file cannot be read/written.
    """
    planned = plan_entry(
        path,
        section,
        title,
        files,
        body,
        closing_sentence=closing_sentence,
        pin=pin,
        fork_repo=fork_repo,
        fork_commit=fork_commit,
    )
    planned.write()
    return planned.number
