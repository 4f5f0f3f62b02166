"""Check a Lethe deployment's audit log from outside: ``python -m service.audit.check --url URL``.

Chains recomputed against the heads and ``--anchors``, then each model's versions against its ledger,
release events and served weights. Exit status 0 when everything holds, 1 otherwise, 2 for a usage error."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from service.audit.options import add_options
from service.audit.schemas import AuditEventOut
from service.audit.service import ChainReport, chains_of_model, model_chain, verify_events

_PAGE = 1000


def heads(client: httpx.Client) -> dict[str, tuple[int, str]]:
    """Each chain's head as the service reports it: chain -> (last sequence number, last hash)."""
    return {
        c["chain"]: (int(c["head_seq"]), c["head_hash"]) for c in _get(client, "/v1/audit/verify")["chains"]
    }


def chain_events(client: httpx.Client, chain: str) -> list[AuditEventOut]:
    """Every event of ``chain``, in sequence order, paged through the API."""
    events = _pages(client, "/v1/audit/events", "events", ("after_id", "id"), _PAGE, chain=chain)
    return sorted((AuditEventOut.model_validate(e) for e in events), key=lambda e: e.seq)


def check(
    client: httpx.Client,
    chains: list[str] | None = None,
    anchors: Mapping[str, Mapping[int, str]] | None = None,
    read: dict[str, list[AuditEventOut]] | None = None,
) -> list[ChainReport]:
    """``chains`` (default: every reported or anchored one) checked against the heads and ``anchors``."""
    anchors = anchors or {}
    reported = heads(client)
    wanted = chains if chains is not None else sorted(reported | {c: (0, "") for c in anchors})
    reports = []
    for chain in wanted:
        if chain not in reported:
            reports.append(ChainReport(chain, 0, 0, "", False, "the service reports no such chain", 1))
            continue
        head_seq, head_hash = reported[chain]
        events = chain_events(client, chain)
        if read is not None:
            read[chain] = events
        reports.append(verify_events(chain, events, head_seq, head_hash, anchors.get(chain)))
    return reports


_RELEASES = ("model.trained", "version.created", "retrain.completed")  # each names its weights' digest


@dataclass
class ModelReport:
    model_id: int
    versions: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _get(client: httpx.Client, path: str, **params: Any) -> Any:
    response = client.get(path, params=params)
    response.raise_for_status()
    return response.json()


def _pages(
    client: httpx.Client, path: str, key: str, cursor: tuple[str, str], limit: int, **params: Any
) -> list[Any]:
    """Every item of a paged list; ``cursor``: (query parameter, item field it continues from)."""
    parameter, item_field = cursor
    items: list[Any] = []
    while True:
        after = {parameter: items[-1][item_field]} if items else {}
        page = _get(client, path, limit=limit, **params, **after)[key]
        items.extend(page)
        if len(page) < limit:
            return items


def check_model(client: httpx.Client, model_id: int, events: Sequence[AuditEventOut]) -> ModelReport:
    """The model's versions against its ledger, its audit chain (``events``) and the weights served."""
    versions = _pages(client, f"/v1/models/{model_id}/versions", "versions", ("after_seq", "seq"), 1000)
    charges = _get(client, f"/v1/models/{model_id}/budget")["charges"]
    report = ModelReport(model_id, len(versions))
    entries: dict[int, list[dict[str, Any]]] = {}
    for entry in charges:
        entries.setdefault(entry["version_seq"], []).append(entry)
        if entry["spent"] > entry["cap"] * (1 + 1e-9):
            report.problems.append(
                f"a {entry['kind']} entry of epoch {entry['budget_epoch']} spends {entry['spent']} of a cap of "
                f"{entry['cap']}"
            )
    logged = {
        int(e.payload.get("seq", 0)): e.payload.get("weights_sha256") for e in events if e.type in _RELEASES
    }
    for version in versions:
        report.problems += _version_problems(
            version, entries.get(version["seq"], []), logged.get(version["seq"])
        )
    report.problems += _served_problems(client, model_id, {v["seq"]: v["weights_sha256"] for v in versions})
    return report


def _version_problems(
    version: dict[str, Any], entries: list[dict[str, Any]], logged: str | None
) -> list[str]:
    seq, cert = version["seq"], version["certificate"]
    problems = []
    if len(entries) != 1:
        problems.append(f"version {seq} has {len(entries)} ledger entries; every version has exactly one")
    else:
        entry = entries[0]
        for name, key in (("charge", "charge"), ("spent", "budget_spent"), ("cap", "budget_cap")):
            if not math.isclose(
                float(entry[name]), float(cert.get(key, math.nan)), rel_tol=1e-9, abs_tol=1e-12
            ):
                problems.append(
                    f"version {seq}: the ledger's {name} {entry[name]} is not its certificate's {cert.get(key)}"
                )
        if entry["budget_epoch"] != version["budget_epoch"]:
            problems.append(
                f"version {seq}: ledger epoch {entry['budget_epoch']}, version epoch {version['budget_epoch']}"
            )
    if logged != version["weights_sha256"]:
        problems.append(
            f"version {seq}: the audit log names weights {logged}, the version {version['weights_sha256']}"
        )
    return problems


def _served_problems(client: httpx.Client, model_id: int, digests: Mapping[int, str]) -> list[str]:
    """The weights served now must hash to the digest of the version the service says it serves."""
    response = client.get(f"/v1/models/{model_id}/weights")
    if response.status_code in (404, 409, 410):  # no weights served: not trained yet, or deleted
        return []
    response.raise_for_status()
    seq = int(response.headers["X-Model-Version"])
    served = hashlib.sha256(response.content).hexdigest()
    if served != digests.get(seq):
        return [f"the weights served as version {seq} hash to {served}, the version says {digests.get(seq)}"]
    return []


def save_anchors(path: Path, reports: list[ChainReport]) -> None:
    """Each intact chain's head, as anchors for the next check."""
    anchors = {r.chain: {"seq": r.head_seq, "hash": r.head_hash} for r in reports if r.ok and r.head_seq}
    path.write_text(json.dumps(anchors, indent=2, sort_keys=True) + "\n")


@contextmanager
def service_client(
    url: str | None, token: str | None, client: httpx.Client | None = None
) -> Iterator[httpx.Client]:
    """``client`` if given, else a client of ``url`` with bearer ``token``, closed at the end."""
    if client is not None:
        yield client
        return
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=url or "", headers=headers, timeout=30) as own:
        yield own


@dataclass
class Outcome:
    """What one run of the check found: each chain's report, then each model's."""

    chains: list[ChainReport]
    models: list[ModelReport]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.chains) and all(m.ok for m in self.models)

    def lines(self) -> list[str]:
        """The report as printed: one line per chain, per model that holds, per problem."""
        out = []
        for r in self.chains:
            if r.ok:
                out.append(f"ok      {r.chain}: {r.events} events, head {r.head_seq} {r.head_hash}")
            else:
                out.append(f"FAILED  {r.chain}: {r.problem} (first bad event: {r.first_bad_seq})")
        for m in self.models:
            if m.ok:
                out.append(
                    f"ok      model {m.model_id}: {m.versions} versions match the ledger, the log and the "
                    "weights served"
                )
            out += [f"FAILED  model {m.model_id}: {problem}" for problem in m.problems]
        return out


def run(
    client: httpx.Client,
    chains: list[str] | None = None,
    anchors: Mapping[str, Mapping[int, str]] | None = None,
    model: int | None = None,
    models: bool = True,
) -> Outcome:
    """:func:`check` of ``chains`` (default: all, or ``model``'s), then :func:`check_model` of the models."""
    if model is not None and chains is None:
        reported = heads(client)
        chains = [c for c in chains_of_model(model) if c in reported] or [model_chain(model)]
    read: dict[str, list[AuditEventOut]] = {}
    reports = check(client, chains, anchors, read)
    if not models:
        return Outcome(reports, [])
    if model is not None:
        ids = [model]
    else:
        ids = [int(m["id"]) for m in _pages(client, "/v1/models", "models", ("after_id", "id"), 500)]
    checked = []
    for m in ids:  # the model's chain as the chain check read it, or read now
        chain = model_chain(m)
        checked.append(check_model(client, m, read[chain] if chain in read else chain_events(client, chain)))
    return Outcome(reports, checked)


def anchors_of(path: Path | None) -> dict[str, dict[int, str]] | None:
    """The anchors :func:`save_anchors` wrote (None: none); ValueError saying why ``path`` is unusable."""
    if path is None:
        return None
    try:
        raw = json.loads(path.read_text())
        return {chain: {int(anchor["seq"]): str(anchor["hash"])} for chain, anchor in raw.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"cannot read the anchors in {path}: {exc}") from exc


def run_options(
    client: httpx.Client, args: argparse.Namespace, anchors: Mapping[str, Mapping[int, str]] | None
) -> Outcome:
    """:func:`run` with the options of :func:`add_options`; writes ``--save-anchors`` after it."""
    outcome = run(client, args.chain, anchors, args.model, not args.no_models)
    if args.save_anchors:
        save_anchors(args.save_anchors, outcome.chains)
    return outcome


def main(argv: list[str] | None = None, client: httpx.Client | None = None) -> int:
    """``python -m service.audit.check``, the same check as ``lethe audit``."""
    parser = argparse.ArgumentParser(
        prog="python -m service.audit.check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--url", help="the service, e.g. http://lethe.internal:8000")
    parser.add_argument(
        "--token",
        help="a bearer token, when the service requires one: a read-only one (LETHE_READ_TOKENS) will do",
    )
    add_options(parser)
    args = parser.parse_args(argv)
    if client is None and not args.url:
        parser.error("--url is required")
    try:
        anchors = anchors_of(args.anchors)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        with service_client(args.url, args.token, client) as http:
            outcome = run_options(http, args, anchors)
    except httpx.HTTPError as exc:
        print(f"cannot read the audit log: {exc}", file=sys.stderr)
        return 1
    for line in outcome.lines():
        print(line)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
