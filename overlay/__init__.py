"""overlay: keep local fixes correct on top of MLX and its ROCm fork.

The tree is three layers (upstream pin, fork delta, local series); see
``docs/design.md``.
"""

__version__ = "0.1.0"
