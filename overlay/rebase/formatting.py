"""Formatting-aware patch conflicts: git's ``merge.renormalize`` idea
for C and C++ formatting.

A patch made on clang-formatted code conflicts with a base that lacks the formatting
commit (or the reverse) although nothing but the layout differs. When ``clang-format``
is on PATH and the overlay repository or the tree has a ``.clang-format``, the stop
merges the three sides again after formatting each with that style: a clean merge is
written beside the work file as ``PATH.formatted`` and offered
(``--continue --take-formatted``); and the stop says when the new base and the patch's
pre-image differ only in formatting or whitespace.
"""

from __future__ import annotations

import os
import subprocess

from overlay.fs.atomic import scratch_dir
from overlay.rebase.base import RunBase

#: The files clang-format is asked about.
C_FAMILY = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".hip")
#: The work file beside ``PATH`` that holds the formatted merge.
FORMATTED_SUFFIX = ".formatted"


def clang_format() -> str | None:
    """The ``clang-format`` program on PATH, or ``None``."""
    import shutil  # only when a format is compared (it imports bz2 and lzma)

    return shutil.which("clang-format")


def format_text(program: str, style: bytes, path: str, data: bytes) -> bytes | None:
    """``data`` formatted by clang-format with the ``.clang-format`` text ``style``.

    Args:
        program: clang-format.
        style: the ``.clang-format`` file's bytes.
        path: the file's repository path (its extension picks the language).
        data: the file's bytes.
    Returns:
        The formatted bytes, or ``None`` when clang-format fails.
    """
    with scratch_dir("merge") as tmp:
        with open(os.path.join(tmp, ".clang-format"), "wb") as fh:
            fh.write(style)
        try:
            proc = subprocess.run(
                [
                    program,
                    "--style=file",
                    f"--assume-filename={os.path.join(tmp, os.path.basename(path))}",
                ],
                input=data,
                capture_output=True,
                cwd=tmp,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    return proc.stdout if proc.returncode == 0 else None


def same_but_layout(a: bytes, b: bytes) -> bool:
    """Whether ``a`` and ``b`` differ at most in whitespace (spaces, tabs, line breaks)."""
    return a != b and b"".join(a.split()) == b"".join(b.split())


class FormatSteps(RunBase):
    """Say what formatting has to do with a patch conflict, and offer the formatted merge."""

    def _style(self, tree: str) -> bytes | None:
        """The ``.clang-format`` of the overlay repository, else of ``tree``'s root."""
        try:
            with open(os.path.join(self.root, ".clang-format"), "rb") as fh:
                return fh.read()
        except OSError:
            pass
        entry = self.store.entries(tree, [".clang-format"]).get(".clang-format")
        return self._blob(entry.oid) if entry and entry.kind == "blob" else None

    def _formatting_note(
        self,
        path: str,
        tree: str,
        texts: tuple[bytes, bytes, bytes],
        files: dict[str, bytes | None],
    ) -> str:
        """What the stop adds for a content conflict of ``path``: the formatted merge
        (written to ``files`` as ``PATH.formatted`` when clean) and whether the sides
        differ only in layout; ``""`` when formatting has nothing to say.

        Args:
            path: the conflicted path.
            tree: the new base (its ``.clang-format`` counts).
            texts: (new base, patch pre-image, patch result).
            files: the stop's work files (added to).
        """
        ours, base, theirs = texts
        notes = []
        if same_but_layout(ours, base):
            notes.append(
                "the new base differs from the patch's pre-image only in whitespace "
                "or formatting"
            )
        program = clang_format()
        style = self._style(tree) if program and path.endswith(C_FAMILY) else None
        if program and style is not None:
            formatted = [format_text(program, style, path, t) for t in texts]
            if all(f is not None for f in formatted):
                f_ours, f_base, f_theirs = (f or b"" for f in formatted)
                if f_ours == f_base and not any("formatting" in n for n in notes):
                    notes.append(
                        "the new base differs from the patch's pre-image only in "
                        "clang-format formatting"
                    )
                merged, clean = self._merge_file(
                    f_ours, f_base, f_theirs, ("new base", "pre-image", "patch")
                )
                if clean:
                    files[path + FORMATTED_SUFFIX] = merged
                    notes.append(
                        "merged on clang-formatted base, new base and patch it is "
                        f"clean: {path}{FORMATTED_SUFFIX} holds it, `overlay "
                        f"{self.state.kind} --continue --take-formatted` takes it "
                        "(the whole file as clang-format writes it)"
                    )
        return "; ".join(notes)
