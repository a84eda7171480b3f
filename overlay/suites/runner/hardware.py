"""What this machine offers the suites: GPUs, built backends, host models; why a suite skips."""

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from overlay.suites import racelab
from overlay.suites.config import Suite
from overlay.suites.runner.common import SuiteRunError

#: Environment override for hardware detection: a comma list of present
#: hardware (``amd-gpu``, ``nvidia-gpu``), or ``none``/empty for none.
HARDWARE_ENV = "OVERLAY_SUITE_HARDWARE"
#: Seconds allowed for an external probe (``rocminfo``, ``nvidia-smi``).
_PROBE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Platform:
    """What this machine offers the suites.

    Attributes:
        hardware: present hardware, a subset of ``{"amd-gpu", "nvidia-gpu"}``
            (``none`` is always satisfied).
        backends: backends the children were built for; ``any`` suites ignore it.
        reasons: for each absent hardware, why it counts as absent (one line).
        backend_source: how ``backends`` was decided (for skip messages).
        models: host models whose children can be built and run here
            (``race-lab``: the ROCm toolchain is there).
        model_reasons: for each absent model, why (one line).
    """

    hardware: frozenset
    backends: frozenset
    reasons: Mapping[str, str] = field(default_factory=dict)
    backend_source: str = ""
    models: frozenset = frozenset()
    model_reasons: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON shape: ``{"hardware", "backends", "reasons", "backend_source", "models",
        "model_reasons"}`` (sets as sorted lists)."""
        return {
            "hardware": sorted(self.hardware),
            "backends": sorted(self.backends),
            "reasons": dict(self.reasons),
            "backend_source": self.backend_source,
            "models": sorted(self.models),
            "model_reasons": dict(self.model_reasons),
        }


def _run_probe(argv: list[str]) -> str | None:
    """stdout of a short external probe, or None if it is missing or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "replace")


def _kfd_sysfs_has_gpu(root: str = "/sys/class/kfd/kfd/topology/nodes") -> bool:
    """True when a KFD topology node reports SIMDs (CPU agents report 0)."""
    try:
        nodes = os.listdir(root)
    except OSError:
        return False
    for node in nodes:
        try:
            with open(
                os.path.join(root, node, "properties"),
                encoding="ascii",
                errors="replace",
            ) as fh:
                for line in fh:
                    parts = line.split()
                    if (
                        len(parts) == 2
                        and parts[0] == "simd_count"
                        and parts[1].isdigit()
                        and int(parts[1]) > 0
                    ):
                        return True
        except OSError:
            continue
    return False


def _detect_amd() -> tuple[bool, str]:
    if not os.path.exists("/dev/kfd"):
        return False, "no /dev/kfd (no ROCm kernel driver)"
    if _kfd_sysfs_has_gpu():
        return True, "GPU agent in /sys/class/kfd"
    out = _run_probe(["rocminfo"])
    if out is not None:
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Device Type" and value.strip() == "GPU":
                return True, "rocminfo lists a GPU agent"
    out = _run_probe(["rocm-smi", "--showid"])
    if out is not None and "GPU[" in out:
        return True, "rocm-smi lists a GPU"
    return (
        False,
        "/dev/kfd exists but neither /sys/class/kfd, rocminfo nor rocm-smi shows a GPU agent",
    )


def _detect_nvidia() -> tuple[bool, str]:
    if shutil.which("nvidia-smi") is None:
        return False, "nvidia-smi not found"
    out = _run_probe(["nvidia-smi", "-L"])
    if out is not None and any(line.startswith("GPU ") for line in out.splitlines()):
        return True, "nvidia-smi -L lists a GPU"
    return False, "nvidia-smi -L lists no GPU"


_PLATFORM_CACHE: dict = {}


def detect_platform(
    backend: str | None = None, *, environ: Mapping[str, str] | None = None
) -> Platform:
    """Detect GPUs and decide which backends count as built.

    Hardware: ``amd-gpu`` is present iff ``/dev/kfd`` exists and a GPU agent
    shows in ``/sys/class/kfd`` (``simd_count > 0``), ``rocminfo`` or
    ``rocm-smi``; ``nvidia-gpu`` iff ``nvidia-smi -L`` lists a GPU. The
    variable ``OVERLAY_SUITE_HARDWARE`` (comma list, or ``none``) replaces
    detection. Probes run once per process (cached).

    Backends: ``backend`` when given (the build the children come from);
    otherwise ``cpu`` plus ``rocm`` with an AMD GPU and ``cuda`` with an
    NVIDIA GPU.

    Models: ``race-lab`` when the ROCm toolchain the race lab compiles with is
    there (:func:`overlay.suites.racelab.unavailable_reason`;
    ``OVERLAY_SUITE_MODELS`` replaces the probe).

    Args:
        backend: ``rocm`` | ``cuda`` | ``cpu`` or None.
        environ: environment to read the override from (default ``os.environ``).

    Returns:
        A :class:`Platform`.

    Raises:
        SuiteRunError: the override names unknown hardware, or ``backend`` is unknown.
    """
    environ = os.environ if environ is None else environ
    override = environ.get(HARDWARE_ENV)
    if override is not None:
        items = {x.strip() for x in override.split(",") if x.strip()} - {"none"}
        bad = items - {"amd-gpu", "nvidia-gpu"}
        if bad:
            raise SuiteRunError(
                f"{HARDWARE_ENV}: unknown hardware {sorted(bad)[0]!r} "
                "(use amd-gpu, nvidia-gpu or none)"
            )
        hardware = frozenset(items)
        reasons = {
            h: f"{HARDWARE_ENV}={override!r}"
            for h in ("amd-gpu", "nvidia-gpu")
            if h not in hardware
        }
    else:
        if "hw" not in _PLATFORM_CACHE:
            amd, amd_why = _detect_amd()
            nv, nv_why = _detect_nvidia()
            _PLATFORM_CACHE["hw"] = (amd, amd_why, nv, nv_why)
        amd, amd_why, nv, nv_why = _PLATFORM_CACHE["hw"]
        hardware = frozenset(
            h for h, ok in (("amd-gpu", amd), ("nvidia-gpu", nv)) if ok
        )
        reasons = {}
        if not amd:
            reasons["amd-gpu"] = amd_why
        if not nv:
            reasons["nvidia-gpu"] = nv_why
    if backend is not None:
        if backend not in ("rocm", "cuda", "cpu"):
            raise SuiteRunError(f"unknown backend {backend!r} (use rocm, cuda or cpu)")
        backends = frozenset({backend})
        source = f"children built for {backend}"
    else:
        inferred = {"cpu"}
        if "amd-gpu" in hardware:
            inferred.add("rocm")
        if "nvidia-gpu" in hardware:
            inferred.add("cuda")
        backends = frozenset(inferred)
        source = "no --backend given; inferred from the GPUs present"
    lab_reason = racelab.unavailable_reason(environ=environ)
    models = frozenset() if lab_reason else frozenset({racelab.MODEL})
    model_reasons = {racelab.MODEL: lab_reason} if lab_reason else {}
    return Platform(
        hardware=hardware,
        backends=backends,
        reasons=reasons,
        backend_source=source,
        models=models,
        model_reasons=model_reasons,
    )


def skip_reason(suite: Suite, platform: Platform) -> str | None:
    """Why ``suite`` cannot run on ``platform``, or None when it can.

    Returns:
        One line such as ``"needs amd-gpu: no /dev/kfd (no ROCm kernel driver)"``.
    """
    if suite.hardware != "none" and suite.hardware not in platform.hardware:
        why = platform.reasons.get(suite.hardware, "not detected")
        return f"needs {suite.hardware}: {why}"
    if (
        suite.model is not None
        and suite.backend != "any"
        and suite.backend not in platform.backends
    ):
        # A gate for GPU children (`overlay ci`, `suite run --backend rocm`) does not
        # run the host models; "needs the cpu backend" would send the user to build MLX
        # for the CPU, which is not what runs them.
        return (
            f"a {suite.model} host-model suite (not a GPU result): run it with "
            "`overlay suite run --host-models` (or `make verify-rocm "
            "OVERLAY_STAGES=host-model`)"
        )
    if suite.backend != "any" and suite.backend not in platform.backends:
        have = ", ".join(sorted(platform.backends)) or "none"
        return f"needs the {suite.backend} backend; available: {have} ({platform.backend_source})"
    if suite.model is not None and suite.model not in platform.models:
        why = platform.model_reasons.get(suite.model, "not detected")
        return f"needs the {suite.model} host model's toolchain: {why}"
    return None
