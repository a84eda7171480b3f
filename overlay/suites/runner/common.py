"""What every part of the suite runner shares: run kinds, the result format, its error."""

from __future__ import annotations

import json
from collections.abc import Callable

from overlay.errors import OverlayError
from overlay.fs.atomic import atomic_write

#: Every run kind, in the order reports list them.
RUN_KINDS = ("pass", "fail", "crash", "hang", "marker")
#: The kinds that count as a failed run.
FAILURE_KINDS = ("fail", "crash", "hang", "marker")
#: Environment override for hardware detection: a comma list of present
#: hardware (``amd-gpu``, ``nvidia-gpu``), or ``none``/empty for none.
HARDWARE_ENV = "OVERLAY_SUITE_HARDWARE"
#: Version of the ``result.json`` shape.
RESULT_FORMAT = 1

#: ``progress(done, total, failures)``, called after each run.
ProgressFn = Callable[[int, int, int], None]


class SuiteRunError(OverlayError):
    """A suite cannot be run: child not found or not startable, results dir unusable (exit 2)."""


def write_json(path: str, data: object) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically (temp file + rename)."""
    atomic_write(
        path,
        (json.dumps(data, indent=2, sort_keys=False) + "\n").encode(),
        durable=False,
    )
