"""The race lab: host-model suite children built from an exported layer.

A *host-model* suite (``model = "race-lab"`` in ``suites.toml``) runs MLX's ROCm
host code on any Linux box: the file under test is compiled from a layer that
``overlay export`` writes (never copied into this repository), against the
real ROCm headers, and linked with our model of the HIP runtime and hipBLASLt
(``patches-rocm/suites/racelab/``) under ThreadSanitizer or AddressSanitizer.
What such a run proves, and what only an AMD GPU can, is in
``docs/race-lab.md``.

Layout of one build (``build/race-lab/<label>/`` by default)::

    src/                   the exported layer (incremental export)
    obj-tsan/, obj-asan/   objects, one per source and sanitizer
    bin/<child>_<san>      the linked children
    <child>_<san>          launchers the suites name (they run bin/... inside the
                           toolchain chroot, or directly with a system ROCm)
    racelab.json           what was built: tree, label, compiler, children

Compilers: the chroot made by ``tools/rocm-toolchain.sh`` (its clang++ and the
ROCm 7.2.4 headers; needs root, as every chroot command does) or a system ROCm
(``$ROCM_PATH/llvm/bin/clang++`` with ``$ROCM_PATH/include``), found by
:func:`overlay.build.find_toolchain`.

The package (every name below is re-exported here):

* :mod:`~overlay.suites.racelab.lab` -- the model's name, sanitizers, children, layout;
* :mod:`~overlay.suites.racelab.compiler` -- the toolchain's clang++ and the launchers;
* :mod:`~overlay.suites.racelab.builder` -- compiling, linking, the build record.
"""

from __future__ import annotations

from overlay.suites.config import MODELS  # every value a suite's ``model`` may take
from overlay.suites.racelab.builder import (
    LabBuild,
    build_layer,
    build_tree,
    build_without_patch,
)
from overlay.suites.racelab.compiler import (
    FORWARDED_ENV,
    LabCompiler,
    find_lab_compiler,
    unavailable_reason,
)
from overlay.suites.racelab.lab import (
    CHILDREN,
    MODEL,
    MODELS_ENV,
    SANITIZERS,
    STAMP,
    LabChild,
    LabError,
    default_out_dir,
    lab_sources_dir,
)

__all__ = [
    "FORWARDED_ENV",
    "STAMP",
    "MODEL",
    "MODELS",
    "MODELS_ENV",
    "SANITIZERS",
    "LabChild",
    "CHILDREN",
    "LabError",
    "LabCompiler",
    "LabBuild",
    "lab_sources_dir",
    "default_out_dir",
    "find_lab_compiler",
    "unavailable_reason",
    "build_tree",
    "build_layer",
    "build_without_patch",
]
