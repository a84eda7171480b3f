"""Building the race lab: objects keyed by what went into them, linked children, launchers."""

import contextlib
import dataclasses
import datetime as _dt
import functools
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from overlay.errors import EXIT_FINDINGS
from overlay.parallel import run_child, run_parallel
from overlay.suites.racelab.compiler import LabCompiler, find_lab_compiler
from overlay.suites.racelab.lab import (
    CHILDREN,
    SANITIZERS,
    STAMP,
    LabChild,
    LabError,
    default_out_dir,
    lab_sources_dir,
)

if TYPE_CHECKING:
    from overlay.workspace import Workspace


@dataclasses.dataclass
class LabBuild:
    """What :func:`build_tree` produced.

    Attributes:
        out_dir: the build directory; pass it as ``--child-dir``.
        tree: the exported layer's tree SHA.
        label: ``patched``, ``forked``, ``without-<patch stem>``, ...
        programs: launcher paths, ``<child>_<sanitizer>``.
        compiled: objects compiled this time (0 when everything was up to date).
        seconds: wall time of the build.
    """

    out_dir: str
    tree: str
    label: str
    programs: list
    compiled: int
    seconds: float


def _digest(*parts: bytes | str) -> str:
    """SHA-256 hex of the parts, each NUL-terminated (an object's key)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def _read(path: str) -> bytes:
    """The bytes of ``path``."""
    with open(path, "rb") as fh:
        return fh.read()


def _load_stamp(out_dir: str) -> dict:
    """The last build record of ``out_dir`` (``{}`` when missing or unreadable)."""
    try:
        with open(os.path.join(out_dir, STAMP), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def build_tree(
    root: str,
    tree_dir: str,
    out_dir: str,
    *,
    tree: str,
    label: str,
    compiler: LabCompiler | None = None,
    children: Sequence[LabChild] = CHILDREN,
    sanitizers: Sequence[str] = tuple(SANITIZERS),
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
    model_objects: str | None = None,
) -> LabBuild:
    """Compile and link the lab's children against an exported tree.

    Objects are compiled again only when their source, the lab's headers, the
    flags, the compiler or (for sources that include the tree) the tree changed.
    The model's objects (lab sources that do not include the tree: the HIP,
    hipBLASLt and rocBLAS models, the GEMM, the self-test) do not depend on the
    layer: they are kept in ``model_objects`` under a name made of their key and
    shared by every build, so a second layer compiles only the objects of its own
    tree.

    Args:
        root: the overlay repository (the lab's sources are under it).
        tree_dir: the exported layer (``-I`` root; holds the tree sources).
        out_dir: the build directory (created).
        tree: the exported tree's SHA (recorded; part of the objects' keys).
        label: a name for reports (``patched``, ``forked``, ...).
        compiler: default :func:`find_lab_compiler`.
        children: which children to build.
        sanitizers: keys of :data:`SANITIZERS`.
        jobs: parallel compiles (default: the CPU count).
        progress: called with one line per compiled object.
        model_objects: the shared cache of the model's objects (default
            ``model-objects`` beside ``out_dir``: ``build/race-lab/model-objects``).
    Returns:
        A :class:`LabBuild`.
    Raises:
        LabError: no compiler (exit 2); a source missing from the tree or a
            compile or link error (exit 1; the compiler's output is in the message).
    """
    start = time.monotonic()
    compiler = compiler or find_lab_compiler(root)
    lab = lab_sources_dir(root)
    out_dir = os.path.abspath(out_dir)
    tree_dir = os.path.abspath(tree_dir)
    shared = os.path.abspath(
        model_objects or os.path.join(os.path.dirname(out_dir), "model-objects")
    )
    os.makedirs(os.path.join(out_dir, "bin"), exist_ok=True)
    os.makedirs(shared, exist_ok=True)
    binds = sorted(
        {out_dir, lab, shared}
        | ({tree_dir} if not tree_dir.startswith(out_dir + os.sep) else set())
    )
    stamp = _load_stamp(out_dir)
    keys: dict[str, str] = (
        dict(stamp.get("objects", {}))
        if stamp.get("compiler") == compiler.description
        else {}
    )
    units, links = _plan(
        root, lab, (tree_dir, tree), (out_dir, shared), compiler, children, sanitizers
    )
    todo = [
        (src, obj, key, flags)
        for (src, obj, key, flags) in units
        if not os.path.isfile(obj)
        or (
            not obj.startswith(shared + os.sep)  # a shared object's name is its key
            and keys.get(os.path.relpath(obj, out_dir)) != key
        )
    ]
    errors, first_error = _compile(compiler, todo, binds, out_dir, keys, jobs, progress)
    record: dict[str, object] = {
        "format": 1,
        "label": label,
        "tree": tree,
        "compiler": compiler.description,
        "objects": keys,
        "children": [c.name for c in children],
        "sanitizers": list(sanitizers),
    }
    _write_json(os.path.join(out_dir, STAMP), record)
    log = os.path.join(out_dir, "build.log")
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("\n".join(errors) + ("\n" if errors else ""))
    if errors:
        raise LabError(
            f"race lab build failed: {len(errors)} object(s); first: {first_error}",
            hint=f"compiler output in {log}",
            exit_code=EXIT_FINDINGS,
        )

    programs = []
    rebuilt = {obj for (_s, obj, _k, _f) in todo}
    for san, binary, objs in links:
        if (
            not os.path.isfile(binary)
            or rebuilt.intersection(objs)
            or any(os.path.getmtime(o) > os.path.getmtime(binary) for o in objs)
        ):
            _link(compiler, san, binary, objs, binds, out_dir, log)
        programs.append(_write_launcher(compiler, binary, out_dir))
    record["built"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    record["programs"] = [os.path.basename(p) for p in programs]
    _write_json(os.path.join(out_dir, STAMP), record)
    return LabBuild(
        out_dir=out_dir,
        tree=tree,
        label=label,
        programs=programs,
        compiled=len(todo),
        seconds=time.monotonic() - start,
    )


#: A compile unit: ``(source path, object path, key, flags)``.
Unit = tuple[str, str, str, list[str]]
#: A link: ``(sanitizer, binary path, object paths)``.
Link = tuple[str, str, list[str]]


def _flags(
    compiler: LabCompiler, san: str, lab: str, tree_dir: str | None
) -> list[str]:
    """The compile flags of one sanitizer's objects (``-I`` the tree when given)."""
    flags = [
        "-std=c++20",
        "-g",
        "-O1",
        "-fno-omit-frame-pointer",
        f"-fsanitize={SANITIZERS[san]}",
        "-D__HIP_PLATFORM_AMD__",
        "-w",
    ]
    for inc in compiler.pre_include:
        flags += ["-include", inc]
    return (
        flags
        + [f"-I{d}" for d in compiler.include_dirs]
        + [f"-I{lab}"]
        + ([f"-I{tree_dir}"] if tree_dir else [])
    )


def _plan(
    root: str,
    lab: str,
    tree_of: tuple[str, str],
    dirs: tuple[str, str],
    compiler: LabCompiler,
    children: Sequence[LabChild],
    sanitizers: Sequence[str],
) -> tuple[list[Unit], list[Link]]:
    """Every object to have (keyed by what goes into it) and every child to link.

    An object's key is its source, the lab's headers, the flags, the compiler and,
    for a source that includes the tree, the tree's SHA. ``tree_of`` is ``(tree_dir,
    tree SHA)``, ``dirs`` ``(out_dir, shared model objects)``: an object of the tree
    is ``<out_dir>/obj-<san>/<name>.o``, one of the model (no tree in it, compiled
    without ``-I`` the tree) ``<shared>/obj-<san>/<name>-<key>.o``.

    Raises:
        LabError: an unknown sanitizer (exit 2); a source missing from the lab or the
            exported layer (exit 1).
    """
    tree_dir, out_dir = tree_of[0], dirs[0]
    headers = b"".join(
        _read(os.path.join(lab, h)) for h in sorted(os.listdir(lab)) if h.endswith(".h")
    )
    units: dict[tuple[str, str, tuple[str, ...]], Unit] = {}
    links: list[Link] = []
    for san in sanitizers:
        if san not in SANITIZERS:
            raise LabError(
                f"unknown sanitizer {san!r} (use {', '.join(SANITIZERS)})", exit_code=2
            )
        for child in children:
            objs = []
            extra = tuple(f.replace("{lab}", lab) for f in child.tree_flags)
            for src, in_tree in [
                (os.path.join(lab, s), False) for s in child.lab_sources
            ] + [(os.path.join(tree_dir, s), True) for s in child.tree_sources]:
                flags_of = extra if in_tree else ()
                if (san, src, flags_of) not in units:
                    units[(san, src, flags_of)] = _unit(
                        src,
                        in_tree,
                        san,
                        compiler,
                        (lab, headers),
                        tree_of,
                        dirs,
                        root,
                        flags_of,
                    )
                objs.append(units[(san, src, flags_of)][1])
            links.append(
                (san, os.path.join(out_dir, "bin", f"{child.name}_{san}"), objs)
            )
    return list(units.values()), links


def _unit(
    src: str,
    in_tree: bool,
    san: str,
    compiler: LabCompiler,
    lab_of: tuple[str, bytes],
    tree_of: tuple[str, str],
    dirs: tuple[str, str],
    root: str,
    extra: tuple[str, ...] = (),
) -> Unit:
    """The compile unit of one source (see :func:`_plan`); ``extra`` flags go
    before the source (a tree source's child flags: its object's name says so).

    Raises:
        LabError: the source is missing (exit 1).
    """
    (lab, headers), (tree_dir, tree), (out_dir, shared) = lab_of, tree_of, dirs
    if not os.path.isfile(src):
        where = "the exported layer" if in_tree else lab
        rel = os.path.relpath(src, tree_dir if in_tree else root)
        raise LabError(f"{rel} is not in {where}", exit_code=EXIT_FINDINGS)
    # Lab sources may include the tree (mlx_shim, the drivers): key them by it too.
    uses_tree = in_tree or b'"mlx/' in _read(src)
    flags = _flags(compiler, san, lab, tree_dir if uses_tree else None) + list(extra)
    key = _digest(
        compiler.description,
        " ".join(flags),
        _read(src),
        headers,
        tree if uses_tree else "",
    )
    stem = os.path.splitext(os.path.basename(src))[0]
    if extra:
        stem += "-" + _digest(*extra)[:8]
    if uses_tree:
        obj = os.path.join(out_dir, f"obj-{san}", f"{stem}.o")
    else:
        obj = os.path.join(shared, f"obj-{san}", f"{stem}-{key[:16]}.o")
    return (src, obj, key, flags)


def _compile(
    compiler: LabCompiler,
    todo: Sequence[Unit],
    binds: Sequence[str],
    out_dir: str,
    keys: dict[str, str],
    jobs: int | None,
    progress: Callable[[str], None] | None,
) -> tuple[list[str], str]:
    """Compile ``todo`` in parallel; ``keys`` gets each compiled object's key and
    loses each failed one's.

    Returns:
        ``(one block of compiler output per failed object, the first error line)``.
    """

    def compile_one(unit: Unit) -> tuple[str, subprocess.CompletedProcess[str]]:
        src, obj, _key, flags = unit
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        tmp = f"{obj}.tmp.{os.getpid()}"  # another build may share the object
        argv = compiler.argv(
            [compiler.cxx, *flags, "-c", src, "-o", tmp], binds, cwd=out_dir
        )
        proc = run_child(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        if proc.returncode == 0:
            os.replace(tmp, obj)
        else:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return src, proc

    done: list[tuple[str, subprocess.CompletedProcess[str]] | None] = [None] * len(todo)

    def job(i: int) -> None:
        result = done[i] = compile_one(todo[i])
        if progress and result[1].returncode == 0:
            progress(f"compiled {os.path.relpath(todo[i][1], out_dir)}")

    # A Ctrl-C cancels the objects not yet started (run_parallel), as in overlay build.
    workers = max(1, jobs or os.cpu_count() or 2)
    run_parallel(workers, [functools.partial(job, i) for i in range(len(todo))])
    errors: list[str] = []
    first_error = ""
    for unit, result in zip(todo, done, strict=True):
        assert result is not None  # run_parallel returned: every job ran
        src, proc = result
        if proc.returncode != 0:
            text = (proc.stdout + proc.stderr).strip()
            errors.append(f"== {unit[1]}: exit {proc.returncode}\n{text}")
            first_error = first_error or next(
                (line for line in text.splitlines() if ": error: " in line),
                f"{src}: exit {proc.returncode}",
            )
            keys.pop(os.path.relpath(unit[1], out_dir), None)
        else:
            keys[os.path.relpath(unit[1], out_dir)] = unit[2]
    return errors, first_error


def _link(
    compiler: LabCompiler,
    san: str,
    binary: str,
    objs: Sequence[str],
    binds: Sequence[str],
    out_dir: str,
    log: str,
) -> None:
    """Link one child; its output is appended to ``log`` when it fails.

    Raises:
        LabError: the link failed (exit 1), naming the first undefined reference.
    """
    argv = compiler.argv(
        [
            compiler.cxx,
            f"-fsanitize={SANITIZERS[san]}",
            "-o",
            binary,
            *objs,
            "-lpthread",
        ],
        binds,
        cwd=out_dir,
    )
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace")
    if proc.returncode == 0:
        return
    text = (proc.stdout + proc.stderr).strip()
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"== link {binary}: exit {proc.returncode}\n{text}\n")
    lines = text.splitlines()
    first = next(
        (x for x in lines if "undefined reference" in x),
        next((x for x in lines if "error" in x), text[:200]),
    )
    raise LabError(
        f"race lab link of {os.path.basename(binary)} failed: {first}",
        hint=f"linker output in {log}",
        exit_code=EXIT_FINDINGS,
    )


def _write_launcher(compiler: LabCompiler, binary: str, out_dir: str) -> str:
    """Write (when it changed) the launcher the suites name; return its path."""
    launcher = os.path.join(out_dir, os.path.basename(binary))
    text = compiler.launcher(binary, [out_dir])
    if not os.path.isfile(launcher) or _read(launcher) != text.encode():
        tmp = f"{launcher}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, launcher)
    return launcher


def _write_json(path: str, data: object) -> None:
    """Write ``data`` as indented JSON, by rename."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)


def children_in(
    tree_dir: str, children: Sequence[LabChild] = CHILDREN
) -> list[LabChild]:
    """The ``children`` whose code under test the exported tree at ``tree_dir`` has.

    A layer without a child's file (the fork's layer has no pinned arena, so no
    ``pinned_race``) builds the others; that child's suites then skip there (child not
    found) instead of the whole build failing.
    """
    return [
        c
        for c in children
        if all(os.path.isfile(os.path.join(tree_dir, s)) for s in c.tree_sources)
    ]


def _export_and_build(
    root: str, store, tree: str, label: str, out_dir: str | None, **kw
) -> LabBuild:
    # export: only when the lab is built; `overlay --help` imports this module
    from overlay.export import export_tree

    out_dir = os.path.abspath(out_dir or default_out_dir(root, label))
    compiler = kw.pop("compiler", None) or find_lab_compiler(root)
    src = os.path.join(out_dir, "src")
    export_tree(store, tree, src)
    kw.setdefault("children", children_in(src))
    return build_tree(
        root, src, out_dir, tree=tree, label=label, compiler=compiler, **kw
    )


def build_layer(
    ws: "Workspace", layer: str = "patched", *, out_dir: str | None = None, **kw
) -> LabBuild:
    """Export ``layer`` of the workspace's overlay and build the lab against it.

    Args:
        ws: the workspace (its root, store and layers: :meth:`Workspace.layers`).
        layer: ``patched`` or ``forked`` (``pin`` has no ROCm backend).
        out_dir: default ``build/race-lab/<layer>``.
        **kw: passed to :func:`build_tree` (``compiler``, ``jobs``, ``progress``, ...).
    Returns:
        A :class:`LabBuild`.
    Raises:
        LabError: another layer asked for (exit 2), or the lab does not build.
        ManifestError, GitError, OfflineMiss, LayerError: the layers cannot be computed.
    """
    if layer not in ("patched", "forked"):
        raise LabError(
            f"the race lab builds the patched or the forked layer, not {layer!r}",
            exit_code=2,
        )
    tree = ws.layers().tree(layer)
    return _export_and_build(ws.root, ws.store, tree, layer, out_dir, **kw)


def build_without_patch(
    ws: "Workspace", patch: str, *, out_dir: str | None = None, **kw
) -> LabBuild:
    """Build the lab against the overlay with ``patch`` left out of the series.

    Args:
        ws: as :func:`build_layer`.
        patch: a name listed in ``patches-rocm/series``.
        out_dir: default ``build/race-lab/without-<patch stem>``.
    Returns:
        A :class:`LabBuild`.
    Raises:
        OverlayError, PatchApplyError: see :func:`overlay.suites.without.layers_without`.
        LabError: the lab does not build.
    """
    # without (layers, the engine): only `--without` builds one
    from overlay.suites.without import layers_without

    stem = patch[: -len(".patch")] if patch.endswith(".patch") else patch
    layers = layers_without(ws, patch)
    return _export_and_build(
        ws.root, ws.store, layers.patched, f"without-{stem}", out_dir, **kw
    )
