"""Printed programs and lower bounds of fixed implementations are those recorded in
golden.json (see :mod:`tests.codegen.golden`): a change of a printer or of the model that
alters a byte of code or a bound shows here, and is recorded again only on purpose."""

from __future__ import annotations

import json

import pytest

from tests.codegen.golden import GOLDEN, PARTS, record_part


@pytest.mark.slow  # 20-30 s each: every refactoring of the printers or the model runs them
@pytest.mark.parametrize("part", PARTS)
def test_programs_and_bounds_are_the_recorded_ones(part: str) -> None:
    expected = {key: value for key, value in json.loads(GOLDEN.read_text()).items()
                if key.split("/")[0] == part}
    got = record_part(part)
    assert expected and got.keys() == expected.keys()
    changed = sorted(key for key in got if got[key] != expected[key])
    assert not changed, (len(changed), changed[:10])
