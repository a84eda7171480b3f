"""A small kill-point sweep (``tests/killsweep.py``; the full one is
``tools/fuzz_kills.py``, recorded in ``docs/fuzz.md``): ``record`` of a new patch and
of an existing patch whose later patch is carried, and ``import whole-file``, each
SIGKILLed at every write point, then one documented way out. Every way out must end
with the records byte for byte as before or as after, one entry, no leftover, the
user's edit intact."""

from __future__ import annotations

import dataclasses

import killsweep
from gitfixtures import build_world


def test_record_and_import_killed_at_every_write_point_end_whole(tmp_path):
    world = build_world(tmp_path / "world")
    new, carry = killsweep.record_scenarios(tmp_path, world, seed=26)
    scenarios = [
        dataclasses.replace(new, ways=("rerun",)),
        dataclasses.replace(carry, ways=("show",)),
        killsweep.import_scenario(tmp_path),
    ]
    for sc in scenarios:
        result = killsweep.sweep(sc, tmp_path)
        assert result["problems"] == [], result
        assert result["points"] >= 3, result  # the journal, each file, the end
