"""The message of a recorded patch: the description wrapped as git wraps messages, an
entry title from a subject, one-line options, and the series' author."""

from __future__ import annotations

import re
import textwrap

from overlay.engine.layers import Layers
from overlay.errors import OverlayError
from overlay.git.run import user_identity
from overlay.records.patchfmt import DEFAULT_AUTHOR


def title_from(subject: str) -> str:
    """An entry title from a subject: ``rocm: bounds-check x`` -> ``Bounds-check x``."""
    title = re.sub(r"^\[[^\]]*\]\s*", "", subject.strip())
    title = re.sub(r"^[\w./-]+:\s+", "", title)
    return title[:1].upper() + title[1:]


def wrap_message(text: str, width: int = 72) -> str:
    """A description with its long prose lines refilled to ``width`` columns (git's
    habit for messages, and how the series' patches are written): a one-line
    ``--description`` becomes a readable paragraph. A paragraph with an indented
    line, a list item or a fence stays exactly as written.

    Args:
        text: the description.
        width: the column to wrap at.
    Returns:
        The text, paragraphs separated by one blank line, no trailing newline.
    """
    out = []
    for para in re.split(r"\n[ \t]*\n", text.strip()):
        lines = para.split("\n")
        verbatim = any(
            ln[:1].isspace() or ln.lstrip().startswith(("- ", "* ", "```"))
            for ln in lines
        )
        if not verbatim and any(len(ln) > width for ln in lines):
            para = textwrap.fill(
                " ".join(para.split()),
                width=width,
                break_long_words=False,
                break_on_hyphens=False,
            )
        out.append(para)
    return "\n\n".join(p for p in out if p.strip())


def one_line(value: str, what: str) -> str:
    """``value`` on one line, blanks collapsed; ``OverlayError`` naming ``what`` when
    empty."""
    value = " ".join(value.split())
    if not value:
        raise OverlayError(f"{what} is empty")
    return value


def series_author(layers: Layers, root: str | None = None) -> str:
    """The author of a new patch: the user's git identity in ``root`` (as ``git
    format-patch`` writes it), else the author of the last patch of the series (a
    team writes as one), else overlay's placeholder."""
    if root is not None:
        who = user_identity(root)
        if who is not None:
            return who
    for result in reversed(layers.patches):
        if result.patch.author:
            return result.patch.author
    return DEFAULT_AUTHOR
