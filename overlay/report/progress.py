"""The one progress display of long work: a status line on stderr.

``overlay build`` passes a :class:`LiveProgress` as its ``progress`` callback
(``(done, total, text)``); ``overlay ci`` shows each stage and the units of its check
or build, the git store each fetch (what, from where, for how long). Every status
carries the time it has run and, for ``n/N`` steps, an estimate of what is left.

Where it shows (:func:`progress_mode`):

* ``live`` on a terminal: a transient rich line, redrawn in place, gone at the end;
* ``plain`` where ``$CI`` is set (GitHub Actions, GitLab CI, ... set it) or
  ``OVERLAY_PROGRESS=plain``: plain ``overlay: label: status`` lines, the first at
  once and then at most one every :data:`PLAIN_INTERVAL` seconds (also while one
  step blocks, such as a fetch), so a CI log shows life without a line per unit;
* ``off`` elsewhere (a pipe, a script's captured stderr stays clean) and with
  ``OVERLAY_PROGRESS=off``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType

    from rich.live import Live

#: Seconds between two plain progress lines.
PLAIN_INTERVAL = 10.0
#: The variable that picks the mode (``live``, ``plain``, ``off``; unset: auto).
PROGRESS_ENV = "OVERLAY_PROGRESS"
MODES = ("live", "plain", "off")


def progress_mode(
    environ: Mapping[str, str] | None = None, isatty: bool | None = None
) -> str:
    """How progress shows here: ``live``, ``plain`` or ``off`` (see the module doc).

    Args:
        environ: the environment (default ``os.environ``).
        isatty: whether stderr is a terminal (default: asked).
    Returns:
        ``OVERLAY_PROGRESS`` when it names a mode; else ``live`` on a terminal,
        ``plain`` where ``$CI`` is set (and not ``false``), ``off`` otherwise.
    """
    environ = os.environ if environ is None else environ
    chosen = environ.get(PROGRESS_ENV, "").strip().lower()
    if chosen in MODES:
        return chosen
    if sys.stderr.isatty() if isatty is None else isatty:
        return "live"
    ci = environ.get("CI", "").strip().lower()
    return "plain" if ci and ci != "false" else "off"


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


class LiveProgress:
    """A one-line ``label: [n/N] description (time, estimate)`` status on stderr.

    Use as a context manager; call the instance with ``(done, total, text)``, or
    :meth:`show` any status, or :meth:`note` a line that stays.

    Args:
        label: the line's prefix (``build rocm``).
        enabled: ``True``: live, ``False``: off; ``None``: :func:`progress_mode`.
        mode: ``live``, ``plain`` or ``off`` (wins over ``enabled``).
        clock: the time source (tests pass their own; real plain mode ticks by it).
    """

    def __init__(
        self,
        label: str,
        enabled: bool | None = None,
        *,
        mode: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label = label
        if mode is None:
            mode = (
                progress_mode() if enabled is None else ("live" if enabled else "off")
            )
        self.mode = mode
        self.enabled = mode != "off"
        self._clock = clock
        self._start = clock()
        self._status = "starting"
        self._left = ""  # the estimate of an n/N status
        self._printed: float | None = None  # when the last plain line went out
        self._live: Live | None = None
        self._host: LiveProgress | None = (
            None  # the display whose line this one borrows
        )
        self._inner: LiveProgress | None = None  # the one borrowing this line
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    #: The live display on screen; rich allows one at a time, so a nested one (a fetch
    #: inside ``overlay ci``) borrows its line while it runs.
    _on_screen: LiveProgress | None = None

    def __enter__(self) -> LiveProgress:
        self._start = self._clock()
        host = LiveProgress._on_screen
        if self.mode == "live" and host is not None:
            self._host, host._inner = host, self
        elif self.mode == "live":
            # rich is imported only for a terminal: a plain run does not pay for it
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self,  # rendered through __rich__: the elapsed time ticks on its own
                console=Console(stderr=True),
                transient=True,
                refresh_per_second=4,
            )
            self._live.__enter__()
            LiveProgress._on_screen = self
        elif self.mode == "plain" and self._clock is time.monotonic:
            # One blocking step (a fetch) must still show life in a CI log.
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __call__(self, done: int, total: int, text: str) -> None:
        """Show ``[done/total] text``, the text cut from the left to fit the terminal,
        with an estimate of the time left once a step is done."""
        left = ""
        elapsed = self._clock() - self._start
        if 0 < done < total and elapsed >= 1:
            left = f", about {_seconds(elapsed / done * (total - done))} left"
        self._set(f"[{done}/{total}] {self._fit(text)}", left)

    def show(self, status: str) -> None:
        """Show ``label: status`` (any text) in place of the previous line."""
        self._set(status, "")

    def note(self, line: str) -> None:
        """Print ``overlay: label: line`` as a line that stays, in the live and plain
        modes (nothing when off), and start a new phase with it (a stage starting): the
        status is ``line``, the time and estimate count from now, and the next status
        goes out at once in plain mode."""
        with self._lock:
            self._status, self._left = line, ""
            self._start, self._printed = self._clock(), None
        text = f"overlay: {self.label}: {line}"
        live = self._live or (self._host._live if self._host is not None else None)
        if live is not None:
            live.console.print(text, markup=False, highlight=False)
        elif self.mode == "plain":
            self._emit(text)

    def _set(self, status: str, left: str) -> None:
        with self._lock:
            self._status, self._left = status, left
        if self.mode == "plain":
            now = self._clock()
            if self._printed is None or now - self._printed >= PLAIN_INTERVAL:
                self._plain(now)

    def _line(self, now: float) -> str:
        return (
            f"{self.label}: {self._status} ({_seconds(now - self._start)}{self._left})"
        )

    def __rich__(self):
        """The live line (rich calls this on every refresh)."""
        from rich.text import Text  # rich: only a live line on a terminal

        inner = self._inner
        if inner is not None:
            return inner.__rich__()
        with self._lock:
            return Text(self._line(self._clock()))

    def _plain(self, now: float) -> None:
        with self._lock:
            self._printed = now
            line = self._line(now)
        self._emit(f"overlay: {line}")

    @staticmethod
    def _emit(text: str) -> None:
        try:
            print(text, file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass  # a closed stderr must not end the work

    def _tick(self) -> None:
        while not self._stop.wait(PLAIN_INTERVAL):
            now = self._clock()
            if self._printed is None or now - self._printed >= PLAIN_INTERVAL:
                self._plain(now)

    def _fit(self, text: str) -> str:
        """``text``, or its end after ``...`` when it is wider than the terminal allows."""
        import shutil  # only when a progress line is drawn (it imports bz2 and lzma)

        width = max(
            20, shutil.get_terminal_size((100, 20)).columns - len(self.label) - 40
        )
        return text if len(text) <= width else "..." + text[-(width - 3) :]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._host is not None:
            self._host._inner, self._host = None, None
        if self._live is not None:
            LiveProgress._on_screen = None
            self._live.__exit__(exc_type, exc, tb)
            self._live = None


__all__ = ["MODES", "PLAIN_INTERVAL", "PROGRESS_ENV", "LiveProgress", "progress_mode"]
