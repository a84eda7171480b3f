"""The manifest an import writes: its defaults and the commented TOML text."""

from __future__ import annotations

import json
from collections.abc import Sequence

from overlay.importer.reading import Upstream

DEFAULT_UPSTREAM_URL = "https://github.com/ml-explore/mlx.git"
#: What the manifest carries before the import excludes the fork changes the overlay dropped.
DEFAULT_INCLUDE = ("CMakeLists.txt", "mlx/**")
DEFAULT_EXCLUDE = ("mlx/backend/cuda/**", "mlx/backend/metal/**")
DEFAULT_ARCHITECTURES = ("gfx1100", "gfx1151")


def _toml_string(value: str) -> str:
    # JSON string escapes (\", \\, \n, \uXXXX) are valid TOML basic-string escapes.
    return json.dumps(value, ensure_ascii=False)


def _toml_list(values: Sequence[str], indent: str = "") -> str:
    if len(values) <= 2:
        return "[" + ", ".join(_toml_string(v) for v in values) + "]"
    return (
        "[\n"
        + "".join(f"{indent}    {_toml_string(v)},\n" for v in values)
        + f"{indent}]"
    )


def render_manifest(
    upstream: Upstream,
    *,
    upstream_url: str,
    fork_url: str,
    exclude: Sequence[str],
    closing_sentence: str,
    architectures: Sequence[str],
) -> str:
    """The text of ``patches-rocm/overlay.toml`` for an import.

    Args:
        upstream: the record with full SHAs.
        upstream_url, fork_url: the remotes.
        exclude: ``[carry] exclude``.
        closing_sentence: ``[policy] closing-sentence``.
        architectures: ``[backend] architectures``.
    Returns:
        TOML text (comments say where each value came from).
    """
    return f"""\
# overlay manifest (docs/manifest.md), written by `overlay import whole-file` from UPSTREAM.
# Rewritten by `overlay rebase` / `overlay sync` with tomlkit; comments survive.

[upstream]
# ml-explore/mlx; OVERLAY_UPSTREAM_URL overrides the URL (a local mirror works).
url = {_toml_string(upstream_url)}
# The MLX pin (UPSTREAM retargeted_to_mlx_pin).
pin = "{upstream.pin}"

[fork]
# UPSTREAM source and branch; OVERLAY_FORK_URL overrides the URL.
url = {_toml_string(fork_url)}
branch = {_toml_string(upstream.branch)}
commit = "{upstream.commit}"
# UPSTREAM fork_upstream_merge_base; the fork delta is merge-base..commit.
merge-base = "{upstream.merge_base}"

[carry]
include = {_toml_list(DEFAULT_INCLUDE)}
# The default excludes, and each fork change the whole-file overlay did not hold.
exclude = {_toml_list(list(exclude))}

[backend]
cmake-option = "MLX_BUILD_ROCM"
architectures = {_toml_list(list(architectures))}

[policy]
# Every entry of the kernels, build and API sections of LOCAL_FIXES.md ends with this.
closing-sentence = {_toml_string(closing_sentence)}
"""
