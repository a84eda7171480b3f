"""Test child: exits 0 but prints its stderr marker twice (a `marker` failure
against ``expect = "exactly 1"``)."""

import sys

print("[hipBLASLt caps] device 0: fp8=0 bf16=1", file=sys.stderr)
print("[hipBLASLt caps] device 0: fp8=0 bf16=1", file=sys.stderr)
print("overlay-suite: done")
