"""The HTTP side of ``lethe``: one httpx client of the API, answers checked and decoded."""

from __future__ import annotations

import json
from typing import Any

import httpx

from lethe_cli.errors import Unreachable, refusal

USER_AGENT = "lethe-cli"


class Api:
    """A client of the service at ``url``: 2xx answers decoded from JSON; a 4xx raises
    :class:`~lethe_cli.errors.Refused`, a 5xx or an answer that is not JSON
    :class:`~lethe_cli.errors.Unreachable` (httpx's own errors propagate: the caller maps them)."""

    def __init__(
        self, url: str, token: str | None, timeout: float, transport: httpx.BaseTransport | None = None
    ) -> None:
        headers = {"User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        return decode(self.http.request(method, path, **kwargs))


def decode(response: httpx.Response) -> Any:
    """The JSON of a 2xx answer; the error of any other."""
    if response.status_code >= 500:
        raise Unreachable(f"the service failed: {response.status_code} {_summary(response)}")
    if response.status_code >= 400:
        raise refusal(response.status_code, _json_or_none(response), response.text)
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Unreachable(
            f"{response.request.url} answered {response.status_code} with no JSON: is this a Lethe service?"
        ) from exc


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _summary(response: httpx.Response) -> str:
    body = _json_or_none(response)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{error.get('code')}: {error.get('message')}"
    return response.text.strip()[:300]
