"""The checks of the records (docs/design.md §8): :mod:`~overlay.checks.verify`
(``overlay verify``: every check, in order, and the MAN and LAY checks),
:mod:`~overlay.checks.series` (the SER checks of the series as text),
:mod:`~overlay.checks.pins` (pin sanity, the fork ahead of the pin, citations the pin
lacks), :mod:`~overlay.checks.codes` (the finding codes and their families),
:mod:`~overlay.checks.findings` (a finding), :mod:`~overlay.checks.render` (text, JSON,
GitHub annotations), :mod:`~overlay.checks.cache` (verify's answer keyed on every input
byte), :mod:`~overlay.checks.locate` (which finding a line belongs to). This module
imports nothing: the cached verify imports only what it needs.
"""
