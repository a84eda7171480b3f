"""The manifest (overlay/records/manifest.py): the pins rewritten to exactly the bytes
tomlkit writes, the optional policy keys read and checked, and a manifest that is not
UTF-8 or nests too deep is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomlkit
from fuzzlib import failure_line, guarded_cli
from gitfixtures import CLOSING, MANIFEST, fresh_python

from overlay.errors import ManifestError
from overlay.records.manifest import load_manifest, parse_manifest, set_pins

POLICY_MANIFEST = """\
[upstream]
url = "https://example.invalid/mlx.git"
pin = "{sha}"
[fork]
url = "https://example.invalid/fork.git"
branch = "rocm-support"
commit = "{sha}"
merge-base = "{sha}"
[carry]
include = ["mlx/**"]
exclude = []
[backend]
cmake-option = "MLX_BUILD_ROCM"
architectures = []
[policy]
closing-sentence = "{closing}"
""".format(sha="a" * 40, closing=CLOSING)
OLD = "Applies to the fork."  # an older form of the closing sentence
ROOT = Path(__file__).resolve().parents[1]
NEW = ("a" * 40, "b" * 40, "c" * 40)


def with_tomlkit(text: str, pin: str, fork: str, base: str) -> str:
    doc = tomlkit.parse(text)
    doc["upstream"]["pin"], doc["fork"]["commit"], doc["fork"]["merge-base"] = (
        pin,
        fork,
        base,
    )
    return tomlkit.dumps(doc)


def _fixture_manifest() -> str:
    return MANIFEST.format(
        upstream="/up",
        fork_url="/fork",
        pin="1" * 40,
        fork="2" * 40,
        base="3" * 40,
        closing="Closing.",
    )


@pytest.mark.parametrize(
    "text",
    [
        (ROOT / "patches-rocm" / "overlay.toml").read_text(),
        _fixture_manifest(),
        _fixture_manifest().replace('pin = "', 'pin="').replace("\n", "\r\n"),
        _fixture_manifest()
        .replace('commit = "2', '  commit   =   "2')
        .replace("# the pin", "#the pin  "),
    ],
)
def test_set_pins_writes_what_tomlkit_writes(text):
    assert set_pins(text, *NEW) == with_tomlkit(text, *NEW)


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.replace(
            'pin = "' + "1" * 40 + '"', "pin = '" + "1" * 40 + "'"
        ),  # a literal string
        lambda t: t.replace("[upstream]\n", "[upstream]\n").replace(
            'pin = "', 'pin = "' + "1" * 40 + '"\npin2 = "'
        ),
        lambda t: (
            t + '\n[extra]\npin = "' + "4" * 40 + '"\n'
        ),  # a pin key elsewhere is not ours, stays as it is
        lambda t: (
            t.replace("[upstream]\n", "")
            .replace('url = "/up"', 'upstream.url = "/up"')
            .replace('pin = "', 'upstream.pin = "')
        ),  # dotted keys
    ],
)
def test_set_pins_leaves_anything_else_to_tomlkit(change):
    text = change(_fixture_manifest())
    got = set_pins(text, *NEW)
    assert got is None or got == with_tomlkit(text, *NEW)


def test_manifest_reads_the_optional_policy_keys():
    m = parse_manifest(
        POLICY_MANIFEST + f'older-closing-sentences = ["{OLD}"]\n'
        "closing-sentence-required-from = 20\n"
        'outside-tree = ["tests/**", "third_party/**"]\n'
    )
    assert m.older_closing_sentences == (OLD,)
    assert m.closing_sentence_required_from == 20
    assert m.outside_tree == ("tests/**", "third_party/**")
    plain = parse_manifest(POLICY_MANIFEST)
    assert (
        plain.older_closing_sentences,
        plain.closing_sentence_required_from,
        plain.outside_tree,
    ) == ((), None, ())


@pytest.mark.parametrize(
    "extra, words",
    [
        (f'older-closing-sentences = ["{OLD}"]\n', "come together"),
        ("closing-sentence-required-from = 20\n", "come together"),
        (
            "older-closing-sentences = []\nclosing-sentence-required-from = 3\n",
            "at least one",
        ),
        (
            f'older-closing-sentences = ["{OLD}"]\nclosing-sentence-required-from = 0\n',
            "1 or more",
        ),
        (
            f'older-closing-sentences = ["{OLD}"]\nclosing-sentence-required-from = true\n',
            "must be an integer",
        ),
        ('outside-tree = "tests/**"\n', "outside-tree must be a list"),
        ('outside-tree = [""]\n', "empty glob"),
        ("older-forms = []\n", "unknown key(s) older-forms"),
    ],
)
def test_manifest_refuses_bad_policy_keys(extra, words):
    with pytest.raises(ManifestError) as info:
        parse_manifest(POLICY_MANIFEST + extra)
    assert words in info.value.message


def test_manifest_not_utf8_and_nested_toml(clean):
    manifest = clean.root / "patches-rocm" / "overlay.toml"
    text = manifest.read_bytes()
    manifest.write_bytes(text + b"# \xff\n")
    with pytest.raises(
        ManifestError, match=r"not UTF-8: invalid start byte at byte \d+ \(line \d+\)"
    ):
        load_manifest(str(clean.root))
    manifest.write_bytes(text + b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n")
    result = guarded_cli(clean.root, "verify")
    assert result.exit_code == 2 and "nested too deeply" in failure_line(result)
    manifest.write_bytes(text + b"[extra]\nn = " + b"7" * 5000 + b"\n")
    result = guarded_cli(clean.root, "status")
    assert result.exit_code == 2 and "4300 digits" in failure_line(result)


# -- the table kept for the next command ----------------------------------------------


def _cache(root: Path) -> Path:
    return root / ".overlay" / "manifest-cache.json"


def test_the_table_is_kept_and_read_back_without_tomllib(clean):
    first = load_manifest(str(clean.root))
    assert not _cache(clean.root).exists()  # no state directory: none is made for it
    (clean.root / ".overlay").mkdir()
    assert load_manifest(str(clean.root)) == first
    kept = json.loads(_cache(clean.root).read_text())
    assert kept["table"]["upstream"]["pin"] == first.pin
    # A new process: the same bytes are read from the state, tomllib never imported.
    out = fresh_python(
        "import sys; from overlay.records.manifest import load_manifest; "
        f"m = load_manifest({str(clean.root)!r}); "
        "print(m.pin, 'tomllib' in sys.modules)"
    )
    assert out.split() == [first.pin, "False"]
    assert load_manifest(str(clean.root)) == first


def test_an_edit_of_the_same_size_is_read_from_the_file(clean):
    (clean.root / ".overlay").mkdir(exist_ok=True)
    manifest = clean.root / "patches-rocm" / "overlay.toml"
    first = load_manifest(str(clean.root))
    text = manifest.read_text()
    new_pin = "f" * 40 if first.pin != "f" * 40 else "e" * 40
    manifest.write_text(text.replace(first.pin, new_pin))  # the same size
    assert load_manifest(str(clean.root)).pin == new_pin
    assert json.loads(_cache(clean.root).read_text())["table"]["upstream"]["pin"] == (
        new_pin
    )


@pytest.mark.parametrize("damage", [b"", b"{not json", b"[]", b'{"key": 1}'])
def test_a_damaged_cache_is_parsed_again_and_replaced(clean, damage):
    (clean.root / ".overlay").mkdir(exist_ok=True)
    first = load_manifest(str(clean.root))
    _cache(clean.root).write_bytes(damage)
    assert load_manifest(str(clean.root)) == first
    assert json.loads(_cache(clean.root).read_text())["table"]["upstream"]["pin"] == (
        first.pin
    )


def test_a_kept_table_is_validated_as_a_parsed_one(clean):
    """A table read back (even one a person edited in the state) passes the same checks:
    the cache saves the parse, never the validation."""
    (clean.root / ".overlay").mkdir(exist_ok=True)
    load_manifest(str(clean.root))
    kept = json.loads(_cache(clean.root).read_text())
    del kept["table"]["upstream"]["pin"]
    _cache(clean.root).write_text(json.dumps(kept))
    with pytest.raises(ManifestError, match=r"\[upstream\] missing key\(s\) pin"):
        load_manifest(str(clean.root))


def test_an_invalid_manifest_is_never_kept(clean):
    (clean.root / ".overlay").mkdir(exist_ok=True)
    load_manifest(str(clean.root))
    _cache(clean.root).unlink()
    manifest = clean.root / "patches-rocm" / "overlay.toml"
    manifest.write_text(manifest.read_text() + "[broken\n")
    for _ in range(2):
        with pytest.raises(ManifestError, match="not valid TOML"):
            load_manifest(str(clean.root))
    assert not _cache(clean.root).exists()
