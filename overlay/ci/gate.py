"""``overlay ci --require auto``: the default gate of ``make ci``.

``make ci`` is the first gate a newcomer finds, and CI jobs are copied from it; when it
required nothing, a runner whose toolchain went missing passed with ``check skipped``.
``auto`` is the per-pull-request gate of ``docs/build.md``, decided per machine:

* ``verify`` is always required (it needs no toolchain);
* ``check`` is required where a toolchain for the backend is found (a found one that
  cannot be used, such as a chroot without root, is a failure to see, not a skip), and
  on a CI runner (``$CI`` set, as GitHub Actions, GitLab CI and most others set it),
  where a missing toolchain means its provisioning failed;
* a laptop without a toolchain runs ``check`` as far as it can, reports it skipped
  with the reason, and passes; ``OVERLAY_REQUIRE="verify check"`` (``--require
  verify,check``) makes that a failure.

Stages named beside ``auto`` are required too; an explicit list without ``auto`` is
used as given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from overlay.errors import OverlayError

#: The ``--require`` value that stands for this module's decision.
AUTO = "auto"


def _toolchain_found(backend: str, root: str) -> tuple[bool, str]:
    """Whether a toolchain for ``backend`` is found, and a few words on it."""
    # the build package: only `--require auto` looks for a toolchain
    from overlay.build import find_toolchain

    try:
        tc = find_toolchain(backend, None, repo_root=root)
    except OverlayError as exc:
        # "no ROCm toolchain: ..." is absence; any other refusal (a chroot without
        # root, cmake missing) is a toolchain that is there and broken.
        if exc.message.startswith("no "):
            return False, exc.message.split(":", 1)[0]
        return True, f"a {backend} toolchain is there but unusable ({exc.message})"
    return True, f"a {backend} toolchain is found: {tc.description}"


def required_stages(
    require: Sequence[str],
    backend: str,
    root: str,
    *,
    environ: Mapping[str, str] | None = None,
) -> tuple[tuple[str, ...], str]:
    """The stages ``--require`` asks for, with ``auto`` decided for this machine.

    Args:
        require: the ``--require`` stage names, possibly with :data:`AUTO`.
        backend: the gate's backend (the toolchain looked for).
        root: the overlay repository (where ``tools/rocm-toolchain.sh`` is).
        environ: the environment (default ``os.environ``; ``CI`` is read).
    Returns:
        ``(stages, note)``: the stage names in the order given (``auto``'s at its
        place), and one line saying what ``auto`` decided and why (``""`` without
        ``auto``).
    """
    if AUTO not in require:
        return tuple(dict.fromkeys(require)), ""
    environ = os.environ if environ is None else environ
    found, why = _toolchain_found(backend, root)
    on_ci = bool(environ.get("CI", "").strip()) and environ.get("CI") != "false"
    auto = ["verify"]
    if found or on_ci:
        auto.append("check")
        because = why if found else f"$CI is set ({why}: the runner must provide one)"
        note = f"--require auto: verify, check ({because})"
    else:
        note = (
            f"--require auto: verify only ({why}, and $CI is not set); "
            'OVERLAY_REQUIRE="verify check" (--require verify,check) makes a missing '
            "toolchain fail"
        )
    stages = [s for name in require for s in (auto if name == AUTO else [name])]
    return tuple(dict.fromkeys(stages)), note


__all__ = ["AUTO", "required_stages"]
