"""Concurrency suites: run a child many times in fresh processes and weigh the evidence.

Modules (the CLI in :mod:`overlay.suites.cli` only parses, calls, renders):

* :mod:`overlay.suites.config` -- load and validate ``patches-rocm/suites/suites.toml``;
* :mod:`overlay.suites.runner` -- fresh-process runs, run kinds, stored outputs, hardware;
* :mod:`overlay.suites.stats` -- Clopper–Pearson, Fisher's exact test, runs to acquit;
* :mod:`overlay.suites.report` -- text, JSON, JUnit XML and Markdown reports, A/B report.

See ``docs/suites.md``.
"""

from overlay.suites.config import Marker, Suite, SuiteConfigError, load_suites
from overlay.suites.stats import clopper_pearson, fisher_exact, runs_to_acquit

__all__ = [
    "Marker",
    "Suite",
    "SuiteConfigError",
    "load_suites",
    "clopper_pearson",
    "fisher_exact",
    "runs_to_acquit",
]
