"""A bounded id: as it was when it fits; else its beginning, ``~`` and a digest, within the limit.

The ledger's job ids (characters) and the local backend's directory names (UTF-8 bytes) are both made
with it; the values are pinned: a changed one would orphan a job's ledger row or checkpoint directory.
"""

from __future__ import annotations

import hashlib

import pytest

from airflow_quota.ids import DIGEST_LENGTH, bounded_id

LONG_RUN_ID = "manual__" + "r" * 242
ACCENTED = "é" * 200  # 400 UTF-8 bytes


@pytest.mark.parametrize(
    ("text", "limit", "in_bytes", "expected"),
    [
        pytest.param("train", 160, False, "train", id="a_short_id_is_kept_as_it_is"),
        pytest.param("r" * 160, 160, False, "r" * 160, id="an_id_of_exactly_the_limit_is_kept"),
        pytest.param(
            LONG_RUN_ID,
            160,
            False,
            LONG_RUN_ID[:143] + "~f714fbb6c6f57ea4",
            id="a_long_id_is_cut_in_characters",
        ),
        pytest.param(
            ACCENTED, 255, True, "é" * 119 + "~df20b2aa6262e99e", id="in_bytes_a_character_is_never_split"
        ),
        pytest.param(ACCENTED, 400, True, ACCENTED, id="in_bytes_an_id_that_fits_its_bytes_is_kept"),
    ],
)
def test_a_bounded_id_keeps_its_beginning_and_ends_with_a_digest(
    text: str, limit: int, in_bytes: bool, expected: str
) -> None:
    bounded = bounded_id(text, limit, in_bytes=in_bytes)

    assert bounded == expected
    assert (len(bounded.encode()) if in_bytes else len(bounded)) <= limit


def test_the_digest_names_the_original_when_the_text_is_its_escaped_form() -> None:
    original = "a/" * 130
    escaped = original.replace("/", "%2F")

    bounded = bounded_id(escaped, 255, in_bytes=True, digest_of=original)

    assert bounded.endswith("~" + hashlib.sha256(original.encode()).hexdigest()[:DIGEST_LENGTH])
    assert bounded.startswith(escaped[:100])


def test_two_long_ids_that_differ_only_at_their_end_stay_apart() -> None:
    assert bounded_id("x" * 300 + "1", 160) != bounded_id("x" * 300 + "2", 160)
