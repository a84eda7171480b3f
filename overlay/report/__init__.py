"""Reports in their file formats: :mod:`~overlay.report.templating` (the one jinja2
environment and the text/JSON/Markdown dispatch of the rebase and import reports, its
templates in ``overlay/templates/``) and :mod:`~overlay.report.junit` (the one JUnit XML
writer and its XML-safety rule)."""
