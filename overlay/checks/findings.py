"""Located, machine-readable findings shared by every check family.

A finding is ``{code, severity, path, line, message, hint}`` (docs/design.md §8). Codes
are stable strings ``<FAMILY><NNN>`` (for example ``FIX003``), listed with their
meaning in ``docs/findings.md``; a code never changes meaning once released.
"""

import dataclasses
from collections.abc import Iterable

SEVERITIES = ("error", "warning", "info")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem found by a check.

    Attributes:
        code: stable code, e.g. ``"SER002"``; its letters name the family.
        severity: ``"error"`` (fails verify, exit 1), ``"warning"`` or ``"info"``.
        path: repository-relative path of the file at fault, or ``None``.
        line: 1-based line in ``path``, or ``None`` when not line-specific.
        message: one line saying what is wrong.
        hint: one line saying how to fix it, or ``None``.
    """

    code: str
    severity: str
    path: str | None
    line: int | None
    message: str
    hint: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def family(self) -> str:
        """The code's family prefix, e.g. ``"SER"`` for ``"SER002"``."""
        return self.code.rstrip("0123456789")

    def as_dict(self) -> dict:
        """The finding as a JSON-ready dict with the six documented keys."""
        return dataclasses.asdict(self)


def has_errors(findings: Iterable[Finding]) -> bool:
    """True when any finding has severity ``error``."""
    return any(f.severity == "error" for f in findings)
