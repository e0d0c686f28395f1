"""Ids typed into forms: junk is None (apps/core/ids.py)."""

import pytest

from apps.core.ids import form_id, form_ids


@pytest.mark.parametrize(
    "value, expected",
    [("12", 12), (" 7 ", 7), (3, 3), ("0", None), ("-1", None), ("1.5", None), ("²", None),
     ("１２", None), ("9" * 18, int("9" * 18)), ("9" * 19, None), ("", None), (None, None),
     ("abc", None)],
)  # fmt: skip
def test_form_id(value, expected):
    assert form_id(value) == expected


def test_form_ids_keep_order_drop_repeats_and_junk_and_stop_past_the_limit():
    assert form_ids(["3,1", "x", "3", "2"], limit=5) == [3, 1, 2]
    assert form_ids(["1,2,3,4,5"], limit=2) == [1, 2, 3]  # one past: the caller can refuse
    assert form_ids(["," * 10_000 + "1"], limit=3) == []  # a long list is not read past it
