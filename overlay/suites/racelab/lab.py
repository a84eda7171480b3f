"""What the race lab is: its model name, sanitizers, children, layout and error."""

import dataclasses
import os

from overlay import layout
from overlay.errors import OverlayError

#: The host model this module builds (the value of a suite's ``model`` key).
MODEL = "race-lab"
#: Environment override of model detection: a comma list of available models,
#: or ``none`` (tests, CI runners with a known shape).
MODELS_ENV = "OVERLAY_SUITE_MODELS"
#: Sanitizer suffix -> clang's ``-fsanitize=`` value.
SANITIZERS = {"tsan": "thread", "asan": "address"}
#: The build record in the output directory.
STAMP = "racelab.json"


class LabError(OverlayError):
    """The race lab cannot be built: no toolchain (exit 2) or a compile error (exit 1)."""


@dataclasses.dataclass(frozen=True)
class LabChild:
    """One child program of the lab.

    Attributes:
        name: program name (the launchers are ``<name>_<sanitizer>``).
        lab_sources: files under ``patches-rocm/suites/racelab/``.
        tree_sources: files of the exported layer compiled in (the code under test).
        tree_flags: extra compile flags for this child's tree sources (``{lab}`` is
            the lab's directory); a tree source compiled with other flags for
            another child is another object.
    """

    name: str
    lab_sources: tuple[str, ...]
    tree_sources: tuple[str, ...] = ()
    tree_flags: tuple[str, ...] = ()


#: The lab's children. ``racelab_selftest`` checks the model alone; the others
#: run a file of the exported layer on it.
CHILDREN = (
    LabChild(
        "racelab_selftest",
        (
            "hip_stub.cpp",
            "gemm_model.cpp",
            "hipblaslt_stub.cpp",
            "racelab_selftest.cpp",
        ),
    ),
    LabChild(
        "hipblaslt_race",
        (
            "hip_stub.cpp",
            "gemm_model.cpp",
            "hipblaslt_stub.cpp",
            "mlx_shim.cpp",
            "hipblaslt_race.cpp",
        ),
        ("mlx/backend/rocm/gemms/hipblaslt_gemm.cpp",),
    ),
    LabChild(
        "rocblas_race",
        (
            "hip_stub.cpp",
            "gemm_model.cpp",
            "rocblas_stub.cpp",
            "device_shim.cpp",
            "rocblas_race.cpp",
        ),
        ("mlx/backend/rocm/device.cpp", "mlx/backend/rocm/worker.cpp"),
    ),
    # Fix 3: pinned.cu as Windows HIP builds it (its alias guard compiled in, the
    # Win32 calls from win_stub.cpp), and as Linux builds it (the guard compiled
    # out: the fix-removed column). The .cu file is C++ here (-x c++).
    LabChild(
        "pinned_race",
        ("hip_stub.cpp", "gemm_model.cpp", "win_stub.cpp", "pinned_race.cpp"),
        ("mlx/backend/rocm/pinned.cu",),
        ("-x", "c++", "-include", "{lab}/racelab_win32.h", "-I{lab}/win"),
    ),
    LabChild(
        "pinned_race_noguard",
        ("hip_stub.cpp", "gemm_model.cpp", "win_stub.cpp", "pinned_race.cpp"),
        ("mlx/backend/rocm/pinned.cu",),
        ("-x", "c++"),
    ),
)


def lab_sources_dir(root: str) -> str:
    """``<root>/patches-rocm/suites/racelab``: the model's and the drivers' sources."""
    return os.path.join(root, layout.RACELAB_DIR)


def default_out_dir(root: str, label: str) -> str:
    """``<root>/build/race-lab/<label>``: where :func:`build_layer` puts a build."""
    return os.path.join(layout.under(root, layout.RACE_LAB_BUILDS), label)
