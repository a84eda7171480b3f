"""SHA-1 and SHA-256 (overlay/digests.py): the same digests as hashlib's, CPython's own
implementation while the process has hashed little (OpenSSL not loaded), OpenSSL's for
a large input and once many small ones add up."""

from __future__ import annotations

import hashlib

import pytest
from gitfixtures import fresh_python

from overlay import digests


@pytest.mark.parametrize("name", ["sha1", "sha256"])
@pytest.mark.parametrize(
    "size", [0, 1, 63, 64, 65, 4096, digests.BULK - 1, digests.BULK]
)
def test_the_digests_are_hashlibs(name, size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    ours = getattr(digests, name)(data)
    assert ours.hexdigest() == getattr(hashlib, name)(data).hexdigest()
    # CPython's own, which this process (hashlib loaded) is not given
    assert digests._own(name)(data).digest() == getattr(hashlib, name)(data).digest()
    # updated in parts, as the layers' and the chains' keys are
    h = getattr(digests, name)(data[:7], size=size)
    h.update(data[7:])
    assert h.digest() == getattr(hashlib, name)(data).digest()


def _run(code: str) -> str:
    return fresh_python("import sys\nfrom overlay import digests\n" + code)


def test_a_small_input_loads_no_openssl():
    out = _run(
        "h = digests.sha1(b'blob 1\\0x')\n"
        "digests.sha256(b'x' * 1000).hexdigest()\n"
        "print(h.hexdigest(), 'hashlib' in sys.modules)\n"
    )
    assert out == "c1b0730e0133447badcfd47fd144e254807b06e1 False\n"


def test_a_large_input_goes_to_openssl():
    # a size given up front counts as much as the bytes given
    out = _run(
        f"digests.sha256(b'head', size={digests.BULK})\n"
        "print('hashlib' in sys.modules)\n"
    )
    assert out == "True\n"


def test_many_small_inputs_go_to_openssl_once_they_add_up():
    out = _run(
        f"n = {digests.BULK} // 4096\n"
        "for _ in range(n - 1):\n"
        "    digests.sha1(b'x' * 4096)\n"
        "before = 'hashlib' in sys.modules\n"
        "digests.sha1(b'x' * 4096)\n"
        "print(before, 'hashlib' in sys.modules)\n"
    )
    assert out == "False True\n"
