"""Concurrency suites: run a child many times in fresh processes and weigh the evidence.

Modules (the CLI in :mod:`overlay.cli.suites` only parses, calls, renders):

* :mod:`overlay.suites.config` -- load and validate ``patches-rocm/suites/suites.toml``;
* :mod:`overlay.suites.runner` -- fresh-process runs, run kinds, stored outputs, hardware,
  A/B comparisons (a package: one module per stage);
* :mod:`overlay.suites.stats` -- Clopper–Pearson, Fisher's exact test, runs to acquit;
* :mod:`overlay.suites.report` -- text, JSON, JUnit XML and Markdown reports, A/B report;
* :mod:`overlay.suites.racelab` -- host-model children built from an exported layer
  (a package: the lab, its compiler, the builder);
* :mod:`overlay.suites.without` -- the layers with one patch left out (A/B's other column).

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
