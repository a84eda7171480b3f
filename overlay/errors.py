"""One exception base for expected failures, and the exit codes.

Exit codes (documented in ``docs/exit-codes.md``):

* 0 -- success, nothing to report;
* 1 -- the command ran and found problems (findings, failed runs, a patch
  that does not apply, a conflict that stops a rebase);
* 2 -- usage or environment error (bad manifest, unknown ref, offline miss,
  missing ``git``, hostile path, refused destination);
* 130 -- interrupted (Ctrl-C); one ``overlay:`` line says what state is left;
* 143 -- terminated (SIGTERM; 129 for a SIGHUP) while a build or suites ran
  (:class:`Terminated`).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class Terminated(KeyboardInterrupt):
    """A SIGTERM (or SIGHUP) taken while :func:`overlay.parallel.run_parallel` ran jobs.

    A :class:`KeyboardInterrupt`, so that every cleanup a Ctrl-C runs runs for it too;
    the command line reports it as ``overlay: terminated`` with 128 + the signal's
    number, the status a shell gives a process the signal ended (143 for SIGTERM;
    :func:`interrupt_outcome`).

    Args:
        signum: the signal taken (default SIGTERM, 15).
    """

    def __init__(self, signum: int = 15) -> None:  # SIGTERM (no `import signal` here)
        super().__init__(signum)
        self.signum = signum


def interrupt_outcome(exc: BaseException) -> tuple[str, int]:
    """The word and the exit status for an interrupt ``exc``.

    Returns:
        ``("terminated", 128 + its signal)`` for a :class:`Terminated` (143 for
        SIGTERM, 129 for SIGHUP), else ``("interrupted", 130)``.
    """
    if isinstance(exc, Terminated):
        return "terminated", 128 + exc.signum
    return "interrupted", EXIT_INTERRUPTED


class OverlayError(Exception):
    """An expected failure: one clear line for the user, and an exit code.

    Args:
        message: one line, no trailing period needed; shown as ``overlay: <message>``.
        exit_code: process exit code the CLI uses (default 2, usage/environment).
        hint: optional second line telling the user what to do next.
    """

    exit_code = EXIT_USAGE

    def __init__(
        self, message: str, *, exit_code: int | None = None, hint: str | None = None
    ):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code


class ManifestError(OverlayError):
    """``patches-rocm/overlay.toml`` is missing, malformed or inconsistent (exit 2)."""


class GitError(OverlayError):
    """git is missing, a ref is unknown, or a git command failed (exit 2)."""


class OfflineMiss(GitError):
    """An object is not in the git store and ``--offline`` forbids fetching (exit 2)."""


class UnsafePath(OverlayError):
    """A path from a tree or a patch header is absolute, has ``..``/``.git``, or escapes
    (exit 2)."""


class LayerError(OverlayError):
    """A layer cannot be computed: an unresolved conflict or a patch that does not apply
    (exit 1)."""

    exit_code = EXIT_FINDINGS


class PatchFormatError(OverlayError):
    """A patch file cannot be parsed (exit 2).

    Args:
        message, exit_code, hint: as :class:`OverlayError`.
        line: the 1-based line of the patch file at fault, when one is known
            (``overlay verify`` puts it in the SER004 finding).
        kind: what is wrong when it is not a diff that fails to parse: ``"empty"``
            (no diff at all) or ``"combined"`` (a ``diff --cc``); ``None`` otherwise
            (the SER004 hint depends on it).
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        kind: str | None = None,
        **kwargs,
    ):
        super().__init__(message, **kwargs)
        self.line = line
        self.kind = kind
