"""The access log names no subject in plain: subject ids in queries become ``h:`` + a keyed-hash prefix."""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from service.subjects import SubjectHasher, hashed_names

ACCESS_LOGGER = "uvicorn.access"
SUBJECT_PARAMETERS = ("owner_id", "sample_id")


class SubjectQueryFilter(logging.Filter):
    """Rewrites the path of a uvicorn access-log record so that its subject ids are keyed hashes."""

    def __init__(self, hasher: SubjectHasher) -> None:
        super().__init__()
        self._hasher = hasher

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "_id=" in args[2]:
            record.args = (*args[:2], self.path(args[2]), *args[3:])
        return True

    def path(self, path: str) -> str:
        """``path`` with the values of its subject parameters replaced by keyed hashes."""
        parts = urlsplit(path)
        query = parse_qsl(parts.query, keep_blank_values=True)
        if not any(name in SUBJECT_PARAMETERS for name, _ in query):
            return path
        hashed = [
            (name, self._hashed(name, value)) if name in SUBJECT_PARAMETERS else (name, value)
            for name, value in query
        ]
        return urlunsplit(parts._replace(query=urlencode(hashed, safe=":")))

    def _hashed(self, name: str, value: str) -> str:
        owners, samples = ([value], []) if name == "owner_id" else ([], [value])
        return hashed_names(self._hasher, owners, samples)[value]


def install(hasher: SubjectHasher) -> None:
    """Put a :class:`SubjectQueryFilter` with ``hasher`` on the access logger, in place of any earlier one."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for old in [f for f in logger.filters if isinstance(f, SubjectQueryFilter)]:
        logger.removeFilter(old)
    logger.addFilter(SubjectQueryFilter(hasher))
