"""The one live progress display: a transient status line on stderr (rich).

``overlay build`` passes a :class:`LiveProgress` as its ``progress`` callback
(``(done, total, text)``); any long run that reports steps can do the same. Off a
terminal (CI logs, pipes) it shows nothing, so a captured stderr stays clean.
"""

from __future__ import annotations

import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType

    from rich.live import Live


class LiveProgress:
    """A one-line live ``label: [n/N] description`` status on stderr; silent off a TTY.

    Use as a context manager; call the instance with ``(done, total, text)``. The
    line is transient: it is gone when the ``with`` block ends.

    Args:
        label: the line's prefix (``build rocm``).
        enabled: show the line; ``None``: when stderr is a terminal.
    """

    def __init__(self, label: str, enabled: bool | None = None):
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._live: Live | None = None

    def __enter__(self) -> LiveProgress:
        if self.enabled:
            # rich is imported only for a terminal: a plain run does not pay for it
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            self._live = Live(
                Text(f"{self.label}: starting"),
                console=Console(stderr=True),
                transient=True,
                refresh_per_second=8,
            )
            self._live.__enter__()
        return self

    def __call__(self, done: int, total: int, text: str) -> None:
        """Show ``[done/total] text``, the text cut from the left to fit the terminal."""
        self.show(f"[{done}/{total}] {self._fit(text)}")

    def show(self, status: str) -> None:
        """Show ``label: status`` (any text) in place of the previous line."""
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text(f"{self.label}: {status}"))

    def _fit(self, text: str) -> str:
        """``text``, or its end after ``...`` when it is wider than the terminal allows."""
        width = max(
            20, shutil.get_terminal_size((100, 20)).columns - len(self.label) - 16
        )
        return text if len(text) <= width else "..." + text[-(width - 3) :]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None


__all__ = ["LiveProgress"]
