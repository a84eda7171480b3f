"""Reports in their file formats: :mod:`~overlay.report.templating` (the one jinja2
environment and the text/JSON/Markdown dispatch of the import report, its templates in
``overlay/templates/``; the rebase report renders itself, ``overlay/rebase/report.py``)
and :mod:`~overlay.report.junit` (the one JUnit XML writer and its XML-safety rule)."""
