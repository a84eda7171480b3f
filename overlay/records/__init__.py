"""The records a team keeps in its repository, one module per record.

:mod:`~overlay.records.manifest` (``patches-rocm/overlay.toml``, read and written),
:mod:`~overlay.records.series` (``patches-rocm/series`` and the patch files: read, and
every write of the series), :mod:`~overlay.records.fixes` (``LOCAL_FIXES.md``: model,
parser, writer, the heading rewrite), and the formats they are made of:
:mod:`~overlay.records.mailhead` (a patch's mail head), :mod:`~overlay.records.filediff`
(one file's diff), :mod:`~overlay.records.patchfmt` (rendering a diff as git does),
:mod:`~overlay.records.markers` (the patched-code markers).
"""
