"""The one id rule (unlearning.data.ids.normalize_id): Unicode NFC, case kept, invisible and bidirectional
control characters refused naming their position and code point; uploads (service.datasets.service) and
deletion bodies (service.schemas.SubjectId) apply the same rule."""

from __future__ import annotations

import json
import unicodedata

import pytest
from pydantic import ValidationError

from service.datasets.service import usable_id
from service.db.tables import ID_LENGTH
from service.deletions.schemas import DeletionIn
from unlearning.data.ids import InvalidIdError, normalize_id, shown_id

NFC = "jos\u00e9"
NFD = "jose\u0301"


def test_nfc_and_nfd_forms_are_one_id_and_case_is_kept() -> None:
    assert NFC != NFD and normalize_id(NFD) == normalize_id(NFC) == NFC
    assert unicodedata.is_normalized("NFC", normalize_id("A\u030angstr\u00f6m"))
    assert normalize_id("Alice") == "Alice" and normalize_id("alice") == "alice"  # opaque, case-sensitive
    assert normalize_id(" spaced ") == " spaced "  # visible characters are the caller's business
    assert normalize_id("\u00e9t\u00e9-\U0001f600") == "\u00e9t\u00e9-\U0001f600"


@pytest.mark.parametrize(
    ("value", "position", "code_point"),
    [
        ("ab\u200bc", 2, "U+200B"),  # zero-width space (Cf)
        ("x\u202ey", 1, "U+202E"),  # right-to-left override (Cf)
        ("\u2066id", 0, "U+2066"),  # left-to-right isolate (Cf)
        ("\ufeffid", 0, "U+FEFF"),  # byte-order mark / zero-width no-break space (Cf)
        ("a\u00adb", 1, "U+00AD"),  # soft hyphen (Cf)
        ("a\tb", 1, "U+0009"),  # tab (Cc)
        ("ok\x7f", 2, "U+007F"),  # delete (Cc)
        ("j\u00f6\u0085", 2, "U+0085"),  # next line (Cc, beyond ASCII)
        ("a\u2028b", 1, "U+2028"),  # line separator (Zl)
        ("a\u2029b", 1, "U+2029"),  # paragraph separator (Zp)
        ("a\ud800", 1, "U+D800"),  # lone surrogate (Cs)
        ("\u3164", 0, "U+3164"),  # Hangul filler: displays as nothing
    ],
)
def test_invisible_and_control_characters_are_refused_by_position_and_code(
    value: str, position: int, code_point: str
) -> None:
    with pytest.raises(InvalidIdError) as info:
        normalize_id(value)
    assert info.value.position == position and info.value.code_point == code_point
    assert f"{code_point}" in info.value.problem and f"at position {position}" in info.value.problem
    assert value not in info.value.problem  # the message names the character, never the id


def test_shown_id_escapes_invisible_characters_and_cuts_long_ids() -> None:
    assert shown_id("a\u200bb") == "'a\\u200bb'"
    long = "x" * 300
    assert shown_id(long).endswith("... (300 characters)") and long not in shown_id(long)


def test_uploads_store_the_nfc_form_and_refuse_what_deletions_could_not_name() -> None:
    assert usable_id(NFD) == (NFC, None)
    assert usable_id("Alice") == ("Alice", None)
    problem = usable_id("a\u202eb")[1]
    assert problem is not None and "U+202E" in problem and "position 1" in problem
    # The length is the stored (NFC) form's: 200 decomposed e-acutes are 200 characters once composed.
    assert usable_id("e\u0301" * ID_LENGTH) == ("\u00e9" * ID_LENGTH, None)
    assert "at most" in str(usable_id("e" * (ID_LENGTH + 1))[1])
    assert "empty" in str(usable_id("")[1])


def _deletion(**subjects: object) -> DeletionIn:
    return DeletionIn.model_validate_json(json.dumps(subjects))


def test_deletion_bodies_normalise_ids_as_uploads_do() -> None:
    body = _deletion(owner_ids=[NFD, "Alice"], sample_ids=[NFC], edges=[[NFD, "b"]], graph_ids=[NFD])
    assert body.owner_ids == [NFC, "Alice"] and body.sample_ids == [NFC]
    assert body.edges == [[NFC, "b"]] and body.graph_ids == [NFC]
    assert len(_deletion(sample_ids=["e\u0301" * ID_LENGTH]).sample_ids[0]) == ID_LENGTH


@pytest.mark.parametrize(
    ("field", "ids", "index", "code_point"),
    [
        ("sample_ids", ["a", "b\u200bc"], 1, "U+200B"),
        ("owner_ids", ["x\u202ey"], 0, "U+202E"),
        ("node_feature_ids", ["ok", "ok2", "\u2028"], 2, "U+2028"),
        ("sample_ids", ["a\tb"], 0, "U+0009"),
    ],
)
def test_deletion_bodies_refuse_invisible_characters_naming_the_id_and_character(
    field: str, ids: list[str], index: int, code_point: str
) -> None:
    with pytest.raises(ValidationError) as info:
        _deletion(**{field: ids})
    (error,) = info.value.errors()
    assert error["loc"] == (field, index)
    assert code_point in error["msg"] and "position" in error["msg"]
