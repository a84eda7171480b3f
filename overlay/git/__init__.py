"""The git layer: the one place overlay starts git.

:mod:`~overlay.git.store` (the git store, :class:`~overlay.git.store.Store`, and every
command run against it), :mod:`~overlay.git.run` (starting git: ``run_git``, the
ignored-path check, the version and reachability probes), :mod:`~overlay.git.env` (the
environment git children get), :mod:`~overlay.git.fetch` (fetching into the store),
:mod:`~overlay.git.objects` (writing blobs and trees through one ``cat-file``/``mktree``
pair), :mod:`~overlay.git.treemodel` (trees as Python values), :mod:`~overlay.records.filediff`
(tree diffs), :mod:`~overlay.git.ancestry` (the memoized ancestry questions).
Everything else goes through these (tests/test_overlay.py checks it).
"""
