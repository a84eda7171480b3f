"""``overlay drift --behaviour``: behaviour drift that no compiler sees.

An upstream commit can change what an elementwise functor computes (d5841be95 made
divmod's quotient floor instead of truncate) without changing any declaration: the
fork's copy still compiles and now answers differently. This check compiles the ROCm
backend's unary, binary and ternary functors (``mlx/backend/rocm/device/*_ops.hpp``
of the exported tree) as host code with g++ and a shim for the HIP qualifiers and
intrinsics (:mod:`overlay.drift.behaviour_cpp`), runs each beside upstream's CPU
functor of the same name (``mlx/backend/cpu/{unary,binary}_ops.h``) over exhaustive
small-integer ranges (int8 -64..63, int32 -64..64, uint32 0..128, pairs for binary
functors) and sampled floats (NaN, infinities, signed zeros, denormals, fixed random
values), and reports every functor that disagrees with the inputs that show it and
the upstream commits of the range that changed its reference. A functor that cannot
be compiled for the host, or has no reference, is listed as not checked with why.

What it compares is the functors' logic on the host: HIP intrinsics are mapped to
their ``<cmath>`` meaning, ``__half`` and ``bfloat16`` are not compared (the shim's
stand-ins are floats), and floats a few ulps apart agree (intrinsic rounding).
"""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence

import click

from overlay import layout
from overlay.drift.behaviour_cpp import GUARDS, PREAMBLE, SHIM, SHIM_DECLARED_ONLY
from overlay.drift.declarations import _block_end, _span_commits
from overlay.errors import OverlayError
from overlay.export import export_tree
from overlay.fs.locks import dir_lock
from overlay.git.store import Store

ROCM_HEADERS = {
    1: "mlx/backend/rocm/device/unary_ops.hpp",
    2: "mlx/backend/rocm/device/binary_ops.hpp",
    3: "mlx/backend/rocm/device/ternary_ops.hpp",
}
CPU_HEADERS = {1: "mlx/backend/cpu/unary_ops.h", 2: "mlx/backend/cpu/binary_ops.h"}
CUDA_HEADERS = {
    1: "mlx/backend/cuda/device/unary_ops.cuh",
    2: "mlx/backend/cuda/device/binary_ops.cuh",
    3: "mlx/backend/cuda/device/ternary_ops.cuh",
}

INTS = ("int8_t", "int32_t", "uint32_t")
FLOATS = ("float",)
_FLOAT_MATH = """ArcCos ArcCosh ArcSin ArcSinh ArcTan ArcTanh Cos Cosh Erf ErfInv Exp Expm1
Log Log2 Log10 Log1p Sigmoid Sin Sinh Sqrt Rsqrt Tan Tanh Ceil Floor Round""".split()
#: ``functor -> (types, input guard)``: the dtypes MLX sends each functor (a
#: transcendental sees floats only) and the inputs where both sides are defined C++
#: (no integer division by zero, no shift past the width, no integer power overflow).
DOMAINS: dict[str, tuple[tuple[str, ...], str]] = {
    **{name: (FLOATS, "true") for name in _FLOAT_MATH},
    **{name: (INTS + FLOATS, "true") for name in "Abs Negative Sign Square".split()},
    "BitwiseInvert": (INTS, "true"),
    "LogicalNot": (("bool",), "true"),
    **{
        name: (INTS + FLOATS, "true")
        for name in """Add Subtract Multiply Maximum Minimum Equal NotEqual Greater
        GreaterEqual Less LessEqual""".split()
    },
    **{
        name: (INTS + FLOATS, "ov_divisor(a, b)")
        for name in "Divide Remainder FloorDivide DivMod".split()
    },
    "Power": (INTS + FLOATS, "ov_power(a, b)"),
    **{name: (FLOATS, "true") for name in "NaNEqual LogAddExp ArcTan2".split()},
    **{name: (INTS, "true") for name in "BitwiseAnd BitwiseOr BitwiseXor".split()},
    **{name: (INTS, "ov_shift(a, b)") for name in "LeftShift RightShift".split()},
    **{name: (("bool",), "true") for name in "LogicalAnd LogicalOr".split()},
    "Select": (INTS + FLOATS, "true"),
}
#: Functors whose upstream reference is not a CPU functor of the same name:
#: ``name -> (C++ reference expression, (path, what) of the upstream code it follows)``.
REFERENCES = {
    "FloorDivide": (
        "ov::floor_divide(a, b)",
        ("mlx/backend/cpu/binary.cpp", "DivMod::eval_cpu"),
    ),
    "DivMod": (
        "std::make_pair(ov::floor_divide(a, b), cpu::Remainder{}(a, b))",
        ("mlx/backend/cpu/binary.cpp", "DivMod::eval_cpu"),
    ),
}


@dataclasses.dataclass
class FunctorResult:
    """One functor's comparison.

    Attributes:
        name: the functor (``FloorDivide``); arity: 1, 2 or 3.
        checked: ``{type: (cases, disagreements)}`` of the types compared.
        examples: ``(type, inputs, rocm value, reference value)``, up to 3 a type.
        not_checked: ``{type or "*": why}``.
        commits: ``(sha, subject, where)`` of the range that changed the reference.
    """

    name: str
    arity: int
    checked: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    examples: list[tuple[str, str, str, str]] = dataclasses.field(default_factory=list)
    not_checked: dict[str, str] = dataclasses.field(default_factory=dict)
    commits: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)

    @property
    def disagrees(self) -> bool:
        """Some compared input gave another answer than the reference."""
        return any(bad for _cases, bad in self.checked.values())


@dataclasses.dataclass
class BehaviourReport:
    """What :func:`compare_functors` found: one :class:`FunctorResult` per ROCm
    functor, the program's path and the compile and run times."""

    functors: list[FunctorResult]
    program: str
    compile_seconds: float = 0.0
    run_seconds: float = 0.0

    @property
    def disagreeing(self) -> list[FunctorResult]:
        """The functors that disagree with their reference."""
        return [f for f in self.functors if f.disagrees]

    @property
    def drifted(self) -> list[FunctorResult]:
        """Behaviour drift: disagreeing functors whose reference an upstream commit of
        the range changed (after :func:`attribute`). A disagreement no commit of the
        range explains has stood since before it (the fork's functor never matched the
        CPU one there): it is listed, but it is not drift."""
        return [f for f in self.disagreeing if f.commits]


def rocm_functors(text: str) -> list[str]:
    """The functor structs a ROCm ``*_ops.hpp`` defines at namespace level."""
    return re.findall(r"(?m)^struct (\w+) \{", text)


def cpu_functors(text: str) -> set[str]:
    """The functors an upstream CPU ``*_ops.h`` defines (``DEFAULT_OP(Abs, abs)``,
    ``DEFAULT_BOOL_OP(Equal, ...)``, ``struct Sigmoid {``)."""
    return set(re.findall(r"(?m)^DEFAULT_\w*OP\((\w+),", text)) | set(
        re.findall(r"(?m)^struct (\w+) \{", text)
    )


def _struct_body(text: str, name: str) -> str:
    m = re.search(rf"(?m)^struct {re.escape(name)} \{{", text)
    return text[m.start() : _block_end(text, m.start())] if m else ""


def plan(src: str) -> tuple[list[FunctorResult], list[tuple[FunctorResult, str, str]]]:
    """The functors of the exported tree ``src`` and the ``(functor, type, reference
    expression)`` cases to compile; a functor with no case is marked not checked.

    Raises:
        OverlayError: a ROCm or CPU functor header is missing from the tree (exit 2).
    """
    texts = {}
    for rel in (*ROCM_HEADERS.values(), *CPU_HEADERS.values()):
        try:
            with open(os.path.join(src, rel), encoding="utf-8") as fh:
                texts[rel] = fh.read()
        except OSError as exc:
            raise OverlayError(
                f"drift --behaviour: cannot read {rel}: {exc.strerror}"
            ) from exc
    cpu = set().union(*(cpu_functors(texts[p]) for p in CPU_HEADERS.values()))
    results, cases = [], []
    for arity, rel in ROCM_HEADERS.items():
        for name in rocm_functors(texts[rel]):
            res = FunctorResult(name, arity)
            results.append(res)
            calls = [
                n
                for n in SHIM_DECLARED_ONLY
                if re.search(rf"\b{n}\b", _struct_body(texts[rel], name))
            ]
            if calls:
                res.not_checked["*"] = (
                    f"calls {calls[0]}, a HIP device function with no host definition"
                )
            elif name not in DOMAINS:
                res.not_checked["*"] = (
                    "no input domain in the comparison table (complex, or a type the shim "
                    "does not model)"
                )
            elif name not in cpu and name not in REFERENCES:
                res.not_checked["*"] = (
                    "no upstream CPU functor of this name to compare with"
                )
            else:
                ref = REFERENCES.get(name, (f"cpu::{name}{{}}({_args(arity)})", None))[
                    0
                ]
                cases += [(res, t, ref) for t in DOMAINS[name][0]]
    return results, cases


def _args(arity: int) -> str:
    return ", ".join("cab"[-arity:] if arity == 3 else "ab"[:arity])


def _case_code(res: FunctorResult, type_: str, ref: str, index: int) -> str:
    """One ``static void case_N()``: every input of the domain through both functors."""
    guard = DOMAINS[res.name][1]
    loops = {
        1: f"for ({type_} a : ov::values<{type_}>()) {{ {type_} b{{}}; (void)b;",
        2: f"for ({type_} a : ov::values<{type_}>()) for ({type_} b : ov::values<{type_}>()) {{",
        3: f"for (bool c : ov::values<bool>()) for ({type_} a : ov::values<{type_}>()) "
        f"for ({type_} b : ov::values<{type_}>()) {{",
    }[res.arity]
    shown = {
        1: "ov::show(a)",
        2: 'ov::show(a) + ", " + ov::show(b)',
        3: 'ov::show(c) + ", " + ov::show(a) + ", " + ov::show(b)',
    }[res.arity]
    got = f"rocm::{res.name}{{}}({_args(res.arity)})"
    if res.name == "DivMod":
        got = f"[&] {{ auto v = {got}; return std::make_pair(v[0], v[1]); }}()"
    return (
        f"static void case_{index}() {{\n"
        f'  ov::Tally t{{"{res.name}", "{type_}"}};\n'
        f"  {loops}\n"
        f"    if (!({guard})) continue;\n"
        f"    auto r = {got};\n"
        f"    decltype(r) e = {ref};\n"
        f"    t.add({shown}, r, e);\n"
        f"  }}\n}}\n"
    )


def write_program(
    obj: str, cases: Sequence[tuple[FunctorResult, str, str]]
) -> tuple[str, list[tuple[int, int]]]:
    """Write the shim and ``functors.cpp`` under ``obj``; returns the program's path and
    each case's ``(first, last)`` line, to map a compile error to its case."""
    for rel, text in SHIM.items():
        path = os.path.join(obj, "shim", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    parts = [PREAMBLE, GUARDS]
    spans = []
    line = sum(p.count("\n") for p in parts) + 1
    for i, (res, type_, ref) in enumerate(cases):
        code = _case_code(res, type_, ref, i)
        spans.append((line, line + code.count("\n") - 1))
        line += code.count("\n")
        parts.append(code)
    parts.append(
        "int main() {\n"
        + "".join(f"  case_{i}();\n" for i in range(len(cases)))
        + "  return 0;\n}\n"
    )
    program = os.path.join(obj, "functors.cpp")
    with open(program, "w", encoding="utf-8") as fh:
        fh.write("".join(parts))
    return program, spans


def _failing_cases(
    output: str, program: str, spans: list[tuple[int, int]]
) -> dict[int, str]:
    """``{case index: first error line}`` for the cases a g++ run's errors point into
    (the error's own line, or the ``required from here`` in the program before it)."""
    found: dict[int, str] = {}
    lines_seen: list[int] = []
    name = re.escape(os.path.basename(program))
    for text in output.splitlines():
        lines_seen += [int(n) for n in re.findall(rf"{name}:(\d+):", text)]
        if "error:" not in text:
            continue
        for number in lines_seen:
            for i, (lo, hi) in enumerate(spans):
                if lo <= number <= hi:
                    found.setdefault(i, text.split("error:", 1)[1].strip())
        lines_seen = []
    return found


def compare_functors(
    src: str, obj: str, cxx: str | None = None, rounds: int = 6
) -> BehaviourReport:
    """Compile and run the comparison over the exported tree ``src`` in ``obj``.

    A case (functor, type) that does not compile is dropped and listed as not checked
    with its first error; the rest are compiled again (at most ``rounds`` times).

    Args:
        src: the exported patched tree; obj: the build directory (created).
        cxx: the host compiler (default ``$CXX``, else ``g++``).
    Returns:
        :class:`BehaviourReport`.
    Raises:
        OverlayError: no host compiler, or the headers fail to compile in a way no
            single case explains (the first error is named) (exit 2).
    """
    cxx = cxx or os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None:
        raise OverlayError(
            f"drift --behaviour needs a host C++ compiler: {cxx} not found (apt-get install g++)"
        )
    os.makedirs(obj, exist_ok=True)
    results, cases = plan(src)
    exe = os.path.join(obj, "functors")
    report = BehaviourReport(results, os.path.join(obj, "functors.cpp"))
    for _round in range(rounds):
        program, spans = write_program(obj, cases)
        argv = [
            cxx,
            "-std=c++20",
            "-O1",
            "-ffp-contract=off",
            "-w",
            "-I",
            os.path.join(obj, "shim"),
            "-I",
            src,
            program,
            "-o",
            exe,
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
        )
        report.compile_seconds += time.perf_counter() - t0
        if proc.returncode == 0:
            break
        failing = _failing_cases(proc.stderr, program, spans)
        if not failing:
            first = next(
                (line for line in proc.stderr.splitlines() if "error" in line),
                proc.stderr.strip()[:300],
            )
            raise OverlayError(
                f"drift --behaviour: the functor headers do not compile for the host: {first}"
            )
        for i, why in failing.items():
            res, type_, _ref = cases[i]
            res.not_checked[type_] = f"does not compile for the host: {why}"
        cases = [c for i, c in enumerate(cases) if i not in failing]
    else:
        raise OverlayError(
            "drift --behaviour: the program still fails to compile after dropping the failing cases"
        )
    t0 = time.perf_counter()
    run = subprocess.run(
        [exe],
        capture_output=True,
        text=True,
        errors="replace",
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    report.run_seconds = time.perf_counter() - t0
    by_name = {r.name: r for r in results}
    for line in run.stdout.splitlines():
        fields = line.split("\t")
        if fields[0] == "RESULT" and len(fields) == 5:
            by_name[fields[1]].checked[fields[2]] = (int(fields[3]), int(fields[4]))
        elif fields[0] == "EXAMPLE" and len(fields) == 6:
            by_name[fields[1]].examples.append(tuple(fields[2:6]))  # type: ignore[arg-type]
    if run.returncode != 0:
        raise OverlayError(
            f"drift --behaviour: the comparison program exited {run.returncode}: "
            f"{run.stderr.strip()[:300]}"
        )
    return report


def reference_sites(name: str, arity: int) -> list[tuple[str, str]]:
    """``(upstream path, what)`` of the code a functor's answer follows: the CPU
    reference (a functor, or ``DivMod::eval_cpu``) and the CUDA functor of that name."""
    ref = REFERENCES.get(name, (None, None))[1]
    sites = (
        [ref]
        if ref
        else (
            [(CPU_HEADERS[arity], name)]
            if arity in CPU_HEADERS
            else [(CPU_HEADERS[2], name)]
        )
    )
    return [*sites, (CUDA_HEADERS[arity], name)]


def _site_span(text: str, what: str) -> tuple[int, int] | None:
    """The lines of ``what`` in ``text``: ``struct what {...}``, the macro line
    ``DEFAULT_OP(what, ...)``, or a function definition ``... what(...) {...}``."""
    name = re.escape(what)
    m = re.search(rf"(?m)^DEFAULT_\w*OP\({name},", text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        return line, line
    m = re.search(rf"(?m)^struct {name} \{{", text) or re.search(
        rf"(?m)^[^\n;]*\b{name}\(", text
    )
    if m is None:
        return None
    end = _block_end(text, m.start())
    return text.count("\n", 0, m.start()) + 1, text.count("\n", 0, end) + 1


def attribute(store: Store, old: str, new: str, report: BehaviourReport) -> None:
    """Fill each disagreeing functor's ``commits``: the commits of ``old..new`` that
    changed the lines of its reference sites (:func:`reference_sites`) as ``new`` has
    them (``git log -L``, drift's machinery), oldest first."""
    for res in report.disagreeing:
        seen: dict[str, tuple[str, str, str]] = {}
        for path, what in reference_sites(res.name, res.arity):
            blob = store.git("cat-file", "-p", f"{new}:{path}", check=False)
            span = (
                _site_span(blob.stdout.decode("utf-8", "replace"), what)
                if blob.returncode == 0
                else None
            )
            if span is None:
                continue
            for sha, subject in _span_commits(store, old, new, path, span):
                where = f"{what} in {path}"
                if sha in seen:
                    seen[sha] = (sha, subject, f"{seen[sha][2]}; {where}")
                else:
                    seen[sha] = (sha, subject, where)
        res.commits = list(reversed(list(seen.values())))


def _disagreement_lines(res: FunctorResult) -> list[str]:
    out = []
    for type_, (cases, bad) in sorted(res.checked.items()):
        if bad:
            shown = "; ".join(
                f"({i}): rocm {r}, reference {e}"
                for t, i, r, e in res.examples
                if t == type_
            )
            out.append(
                f"{res.name} {type_}: {bad} of {cases} input(s) disagree, e.g. {shown}"
            )
    return out


def render_text(report: BehaviourReport, old: str | None = None) -> str:
    """The drift (each functor, the inputs that show it, the upstream commits that
    changed its reference), the standing differences, the not-checked list, the
    summary line."""
    out = []
    since = f" since {old[:12]}" if old else ""
    for res in report.drifted:
        out += [f"behaviour drift: {line}" for line in _disagreement_lines(res)]
        out += [
            f"    reference changed by upstream {sha[:12]} {subject} ({where})"
            for sha, subject, where in res.commits
        ]
    for res in report.disagreeing:
        if not res.commits:
            out += [
                f"  differs, no upstream change{since} (not drift): {line}"
                for line in _disagreement_lines(res)
            ]
    for res in report.functors:
        for type_, why in sorted(res.not_checked.items()):
            out.append(
                f"  not checked {res.name}{'' if type_ == '*' else ' ' + type_}: {why}"
            )
    compared = sum(1 for r in report.functors if r.checked)
    cases = sum(n for r in report.functors for n, _b in r.checked.values())
    skipped = sum(1 for r in report.functors if not r.checked)
    out.append(
        f"behaviour: {compared} functor(s) compared over {cases} input(s) with upstream's "
        f"CPU functors; {len(report.drifted)} drifted{since}, "
        f"{len(report.disagreeing) - len(report.drifted)} differ without an upstream change, "
        f"{skipped} not checked; compile {report.compile_seconds:.1f} s, run "
        f"{report.run_seconds:.1f} s"
    )
    return "\n".join(out) + "\n"


#: The build directory of the check, under the repository's ``build/``.
BEHAVIOUR_DIR = "behaviour"


def run_behaviour(ws, old_ref: str | None, fmt: str = "text") -> int:
    """``overlay drift --behaviour``: export ``patched`` into ``build/behaviour/src``,
    compare its functors, attribute, print.

    Args:
        ws: the :class:`~overlay.workspace.Workspace`; old_ref: the start of the range
            (default: the manifest's fork merge base, the upstream the fork's functors
            were written against); fmt: ``text`` or ``json``.
    Returns:
        1 when a functor drifted, else 0.
    Raises:
        OverlayError: no host compiler, an unreadable tree (exit 2).
    """
    manifest, store = ws.manifest, ws.store
    old = store.resolve(old_ref or manifest.merge_base, ["upstream"])
    store.ensure_commit(manifest.pin, ["upstream", "fork"])
    layers = ws.layers()
    base = os.path.realpath(ws.path(os.path.join(layout.BUILD_DIR, BEHAVIOUR_DIR)))
    os.makedirs(base, exist_ok=True)
    with dir_lock(base, ".overlay-behaviour.lock"):
        src = os.path.join(base, layout.BACKEND_SRC)
        export_tree(store, layers.patched, src)
        report = compare_functors(src, os.path.join(base, layout.BACKEND_OBJ))
    attribute(store, old, manifest.pin, report)
    if fmt == "json":
        click.echo(
            json.dumps([dataclasses.asdict(f) for f in report.functors], indent=2)
        )
    else:
        click.echo(render_text(report, old), nl=False)
    return 1 if report.drifted else 0


__all__ = [
    "BEHAVIOUR_DIR",
    "BehaviourReport",
    "FunctorResult",
    "attribute",
    "compare_functors",
    "cpu_functors",
    "plan",
    "reference_sites",
    "render_text",
    "rocm_functors",
    "run_behaviour",
    "write_program",
]
