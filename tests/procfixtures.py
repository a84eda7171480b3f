"""Processes in tests: whether one has ended."""

from __future__ import annotations

import os
import time


def gone(pid, wait_s=5.0):
    """True once ``pid`` no longer runs (absent, or a zombie awaiting its new parent)."""
    end = time.monotonic() + wait_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                return True
        except FileNotFoundError:
            return True
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
