"""The file system: every write overlay makes and every record it reads.

:mod:`~overlay.fs.atomic` (atomic writes and symlinks, writer temp files, scratch
directories, the kill points of the crash tests), :mod:`~overlay.fs.reading` (reading a
record: inside the repository, capped, no symlink out), :mod:`~overlay.fs.locks`
(``flock`` locks and directory locks with their holder), :mod:`~overlay.fs.paths` (the
paths a tree may hold, link safety, the globs of the carry rules).
"""
