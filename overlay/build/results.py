"""What a build did: :class:`BuildResult` (per-unit results, attributed errors, the
link check) and the report lines the CLI prints."""

import dataclasses

from overlay.build.diagnostics import Diagnostic
from overlay.build.linkcheck import LinkCheck
from overlay.export import ExportResult


@dataclasses.dataclass
class UnitResult:
    """One translation unit compiled by ``--only-changed`` or checked by ``--check``.

    Attributes:
        path: repository path (or the suite child's path); kind: ``cpp``/``hip``;
        seconds: wall time (a HIP unit of ``--only-changed``: the time ninja's
            ``.ninja_log`` records for its object, 0 when it was up to date);
        ok: the compiler exited 0; how: ``compile_commands.json``, the ninja
            target, or ``-fsyntax-only`` (check).
    """

    path: str
    kind: str
    seconds: float
    ok: bool
    how: str


@dataclasses.dataclass
class BuildResult:
    """What :func:`build` did.

    Attributes:
        backend, toolchain: what was built and with which toolchain (description).
        arch: HIP architectures (rocm) or ``None``.
        src, obj, log: exported tree, build directory, full log path.
        export: the :class:`~overlay.export.ExportResult`.
        mode: ``build`` (ninja), ``only-changed`` or ``check`` (front end only).
        configured: CMake ran (cache missing or options changed).
        configure_seconds, build_seconds: wall times (s).
        returncode: ninja's exit status (``--only-changed``/``--check``: 0 when every
            unit compiled).
        no_work: ninja said ``no work to do`` (check: :data:`BUILT_RECORD` says the
            last full build compiled this very tree, so no unit was run again).
        diagnostics: located compiler errors, attributed; other_errors: errors without
            a location (driver, linker); failed_targets: ninja ``FAILED:`` outputs.
        units: per-TU results for ``--only-changed`` and ``--check``; skipped_units:
            files that were not compiled or checked (headers without dependency
            data, a source the build generates, a unit that needs a generated
            header), with why.
        suites: ``"built"``, ``"failed"``, or why the suite children were skipped.
        notes: lines to show before the report (architecture choice, ...).
        cache: the compiler cache in front of the compiles (``ccache``, ``sccache``, ``none``).
        link: the link check after a full build (:class:`LinkCheck`), or ``None``.
        drift: the upstream commit behind each error and undefined symbol (one line
            each, :func:`overlay.drift.short`) when a pin range was given and the run failed.
        drift_from: the old pin of that range.
    """

    backend: str
    toolchain: str
    arch: str | None
    src: str
    obj: str
    log: str
    export: ExportResult
    mode: str = "build"
    configured: bool = False
    configure_seconds: float = 0.0
    build_seconds: float = 0.0
    returncode: int = 0
    no_work: bool = False
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    other_errors: list[str] = dataclasses.field(default_factory=list)
    failed_targets: list[str] = dataclasses.field(default_factory=list)
    units: list[UnitResult] = dataclasses.field(default_factory=list)
    skipped_units: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    suites: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    cache: str = "none"
    link: LinkCheck | None = None
    drift: list[str] = dataclasses.field(default_factory=list)
    drift_from: str | None = None

    @property
    def ok(self) -> bool:
        """No error of any kind (an undefined symbol of the link check included) and a zero
        exit status."""
        return (
            self.returncode == 0
            and not self.diagnostics
            and not self.other_errors
            and not self.failed_targets
            and all(u.ok for u in self.units)
            and (self.link is None or not self.link.undefined)
        )

    def first_error(self) -> str:
        """The first error as one line (a located diagnostic with its attribution, else a
        driver/linker line, else a failed unit or target), ``""`` when there is none."""
        if self.diagnostics:
            return self.diagnostics[0].format()
        if self.other_errors:
            return self.other_errors[0]
        if self.link is not None and self.link.undefined:
            return self.link.undefined[0].format()
        failed = [u.path for u in self.units if not u.ok]
        if failed:
            return f"{failed[0]} failed to compile (see {self.log})"
        if self.failed_targets:
            return f"FAILED: {self.failed_targets[0]}"
        if self.returncode:
            return f"exit {self.returncode} (see {self.log})"
        return ""

    def report(self) -> list[str]:
        """Lines for the user: the notes, per-TU times, errors with attribution, the
        link check, the drift, then the summary and the suite children's state."""
        out = list(self.notes)
        out += self._unit_lines()
        out += self._error_lines()
        out.append(self._summary() if not self.ok else self._ok_line())
        if self.suites:
            out.append(f"suite children: {self.suites}")
        return out

    def _unit_lines(self) -> list[str]:
        """One line per unit (a check lists only its failures), the units' total, and the
        units not compiled or checked."""
        check = self.mode == "check"
        out = [
            f"  {unit.seconds:7.2f} s  {unit.kind:4} {unit.path}"
            + ("" if unit.ok else "  FAILED")
            for unit in self.units
            # a check covers every unit of the tree: list only the failures
            if not (check and unit.ok)
        ]
        if self.units:
            total = sum(u.seconds for u in self.units)
            kinds = ", ".join(
                f"{sum(1 for u in self.units if u.kind == k)} {label}"
                for k, label in (("cpp", "C++"), ("hip", "HIP"))
            )
            failed = sum(1 for u in self.units if not u.ok)
            out.append(
                f"{'check (front end only)' if check else 'only-changed'}: "
                f"{len(self.units)} translation unit(s) ({kinds}), {total:.2f} s summed, "
                f"{self.build_seconds:.2f} s wall"
                + (f", {failed} failed" if failed else "")
            )
        elif check and self.no_work:
            out.append(
                f"check: the last full build in {self.obj} compiled this very tree with "
                "the same configure; nothing to check again"
            )
        what = "not checked" if check else "skipped"
        out += [f"  {what} {path}: {why}" for path, why in self.skipped_units]
        return out

    def _error_lines(self) -> list[str]:
        """The located errors, the errors without a location, the link check, the drift."""
        out = [diag.format() for diag in self.diagnostics]
        out += [f"{line} [no location]" for line in self.other_errors]
        if self.link is not None:
            out.extend(self.link.report())
        if self.drift:
            out.append(
                f"drift since the pin {self.drift_from[:12] if self.drift_from else '?'} "
                "(the upstream commit behind each error; `overlay drift --log` gives "
                "the detail):"
            )
            out.extend(f"  {line}" for line in self.drift)
        return out

    def _summary(self) -> str:
        """The failure line: errors by origin, then what else failed, then the log."""
        counts = {"patch": 0, "fork": 0, "upstream": 0}
        elsewhere = 0
        for diag in self.diagnostics:
            layer = getattr(diag.origin, "layer", None)
            if layer in counts:
                counts[layer] += 1
            else:
                elsewhere += 1
        parts = [
            f"{counts['patch']} from patches",
            f"{counts['fork']} from the fork",
            f"{counts['upstream']} from upstream",
        ]
        if elsewhere:
            parts.append(f"{elsewhere} outside the tree or unattributed")
        what = "check" if self.mode == "check" else "build"
        summary = (
            f"{self.backend} {what} failed: {len(self.diagnostics)} error(s) "
            f"({', '.join(parts)})"
        )
        if self.other_errors:
            summary += f", {len(self.other_errors)} without location"
        if self.failed_targets:
            summary += f"; {len(self.failed_targets)} target(s) failed"
        if self.link is not None and self.link.undefined:
            summary += f"; {len(self.link.undefined)} undefined mlx::core symbol(s)"
        return summary + f"; log: {self.log}"

    def _ok_line(self) -> str:
        """The success line: wall time (or nothing to do), configure time or cached."""
        what = "check" if self.mode == "check" else "build"
        done = "nothing to do" if self.no_work else f"{self.build_seconds:.1f} s"
        configure = f"{self.configure_seconds:.1f} s" if self.configured else "cached"
        return (
            f"{self.backend} {what} ok ({done}; configure {configure}); log: {self.log}"
        )
