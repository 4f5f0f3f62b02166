"""The one rule for the ids that name data subjects (sample, owner, node and graph ids), applied alike to
the ids a dataset is uploaded with and to the ids a deletion request names.

An id is an opaque, case-sensitive string compared after Unicode NFC normalisation: ``"jose\\u0301"``
(NFD) and ``"jos\\u00e9"`` (NFC) are the same id, ``"Alice"`` and ``"alice"`` are two. An id may not hold a
character that is invisible or changes how the text around it is displayed: control characters
(category Cc), formatting characters (Cf: the zero-width space U+200B, the bidirectional overrides such
as U+202E, the byte-order mark U+FEFF, ...), line and paragraph separators (Zl, Zp), lone surrogates (Cs)
and the invisible fillers listed in ``INVISIBLE``. Two ids that look the same on screen then name the same
subject, so forgetting one form never leaves the other behind.
"""

from __future__ import annotations

import re
import unicodedata

from unlearning.errors import InvalidDatasetError

__all__ = ["INVISIBLE", "REFUSED_CATEGORIES", "InvalidIdError", "normalize_id", "shown_id"]

REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode general categories an id may not contain."""

INVISIBLE = frozenset(
    {
        "\u034f",  # COMBINING GRAPHEME JOINER (Mn, default-ignorable)
        "\u115f",  # HANGUL CHOSEONG FILLER
        "\u1160",  # HANGUL JUNGSEONG FILLER
        "\u17b4",  # KHMER VOWEL INHERENT AQ
        "\u17b5",  # KHMER VOWEL INHERENT AA
        "\u3164",  # HANGUL FILLER
        "\uffa0",  # HALFWIDTH HANGUL FILLER
    }
)
"""Characters outside the refused categories that still display as nothing."""

_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SHOWN_ID = 80


class InvalidIdError(InvalidDatasetError):
    """An id holding a refused character: ``position`` is its 0-based index in the id, ``code_point`` the
    character written as ``U+`` and at least four hex digits (``U+200B``), and ``problem`` the sentence that
    says so (without the id itself)."""

    def __init__(self, value: str, position: int) -> None:
        char = value[position]
        self.position = position
        self.code_point = f"U+{ord(char):04X}"
        category = unicodedata.category(char)
        name = unicodedata.name(char, "")
        kind = (
            "a control character" if category == "Cc" else "an invisible or bidirectional control character"
        )
        described = f"{self.code_point} ({name}, {kind})" if name else f"{self.code_point} ({kind})"
        self.problem = (
            f"ids may not contain control, invisible or bidirectional formatting characters; this one has "
            f"{described} at position {position} (0-based)"
        )
        super().__init__(self.problem)


def _refused(char: str) -> bool:
    return unicodedata.category(char) in REFUSED_CATEGORIES or char in INVISIBLE


def normalize_id(value: str) -> str:
    """``value`` in Unicode NFC; :class:`InvalidIdError` when it holds a refused character (see the module).

    Case is kept: ids are opaque and case-sensitive. Other checks (length, emptiness, reserved prefixes)
    are the caller's.
    """
    if value.isascii():  # the common case: NFC already, and only the ASCII controls can be refused
        control = _ASCII_CONTROL.search(value)
        if control is not None:
            raise InvalidIdError(value, control.start())
        return value
    for position, char in enumerate(value):
        if _refused(char):
            raise InvalidIdError(value, position)
    return value if unicodedata.is_normalized("NFC", value) else unicodedata.normalize("NFC", value)


def shown_id(value: str) -> str:
    """``value`` quoted for a message (``repr``: invisible characters show as escapes), cut to its first
    characters when long."""
    return repr(value) if len(value) <= _SHOWN_ID else f"{value[:_SHOWN_ID]!r}... ({len(value)} characters)"
