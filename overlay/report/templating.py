"""The one jinja2 environment and the one report dispatch (text, JSON, Markdown).

Every Markdown report but one (``ci``'s PR summary, an import report, a LOCAL_FIXES.md
entry from ``fix new``) comes from a template in ``overlay/templates/``, rendered by
the environment here. The exception is the rebase or sync report, which every run
writes: :func:`overlay.rebase.report.render_markdown` writes it without jinja2. The
import and the rebase report print through :func:`render_report`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable
from typing import Any

from overlay.checks.locate import cache_dir


@functools.cache
def environment() -> Any:
    """The shared :class:`jinja2.Environment` (built on first use: jinja2 is imported
    only by a command that renders a template).

    Settings: templates from the package's ``templates/`` folder; no HTML autoescape
    (the output is Markdown, and a path such as ``a<b>.cpp`` must read as written);
    the template's trailing newline kept; an undefined name raises instead of
    rendering empty (a renamed report field fails loudly, in the tests); the compiled
    templates kept between commands (:func:`_bytecode_cache`).
    """
    import jinja2  # only a command that renders a template

    return jinja2.Environment(
        loader=jinja2.PackageLoader("overlay", "templates"),
        autoescape=False,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        bytecode_cache=_bytecode_cache(jinja2),
    )


def _bytecode_cache(jinja2: Any) -> Any:
    """jinja2's cache of compiled templates, in ``overlay/templates/`` of the user's cache
    directory (beside the default git store, :func:`overlay.checks.locate.cache_dir`),
    or ``None`` where that cannot be made.

    Compiling a template is most of what rendering a report costs; jinja2 keys each
    entry on the template's source and its own and Python's versions, compiles again
    over a damaged entry, and writes an entry whole (temp file and rename). A cache
    that cannot be written only costs the compile: its write errors are ignored.
    """
    directory = os.path.join(cache_dir(), "templates")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None

    class QuietCache(jinja2.FileSystemBytecodeCache):
        # jinja2 itself compiles again over a damaged entry; a failed write is ours.
        def dump_bytecode(self, bucket: Any) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    return QuietCache(directory)


def render_template(name: str, **values: Any) -> str:
    """Render ``overlay/templates/<name>`` with ``values``.

    Raises:
        jinja2.TemplateNotFound, jinja2.UndefinedError: a programming error (a missing
            template or a report without a field the template reads).
    """
    return str(environment().get_template(name).render(**values))


def render_report(
    report: Any,
    fmt: str,
    *,
    text: Callable[[Any], str],
    markdown: Callable[[Any], str],
) -> str:
    """Dispatch a report on ``fmt``.

    Args:
        report: the report; for ``json``, JSON-serialisable data (dicts, lists,
            strings, numbers).
        fmt: ``json`` (indented, one trailing newline), ``markdown`` or anything else
            for ``text``.
        text, markdown: render the plain-text and the Markdown form (a template of
            ``overlay/templates/`` through :func:`render_template`, or code).
    Returns:
        The rendered text, ending in a newline.
    """
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    if fmt == "markdown":
        return markdown(report)
    return text(report)


__all__ = ["environment", "render_report", "render_template"]
