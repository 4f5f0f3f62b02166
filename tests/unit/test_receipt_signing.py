"""Receipt signatures (service.signing) and the verifier's command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.receipts.__main__ import main as receipts_cli
from service.settings import Settings
from service.signing import (
    ReceiptSigner,
    b64url,
    canonical,
    key_id,
    new_seed,
    parse_public_key,
    parse_seed,
    verify,
)

PAYLOAD = {"request_id": 7, "subjects": [{"kind": "owner", "hash": "ab", "id": "ünïcode"}], "note": None}


def test_a_signature_verifies_and_fails_on_any_change() -> None:
    signer = ReceiptSigner(parse_seed(new_seed()))
    public = b64url(signer.public_key)
    signature = signer.sign(PAYLOAD)
    assert verify(PAYLOAD, signature, public)
    assert verify(dict(reversed(list(PAYLOAD.items()))), signature, public)  # key order is not content
    assert not verify({**PAYLOAD, "request_id": 8}, signature, public)
    other = ReceiptSigner(parse_seed(new_seed()))
    assert not verify(PAYLOAD, signature, b64url(other.public_key))
    assert not verify(PAYLOAD, "not-a-signature", public)
    assert signer.key_id == key_id(signer.public_key) != other.key_id


def test_the_canonical_form_is_sorted_compact_utf8() -> None:
    assert canonical({"b": 1, "a": ["x", None]}) == b'{"a":["x",null],"b":1}'
    assert canonical({"id": "é"}) == '{"id":"é"}'.encode()


def test_a_signing_key_must_be_32_bytes_of_base64url() -> None:
    assert len(parse_seed(new_seed())) == 32
    for bad in ("short", b64url(b"x" * 31), "!!!not base64!!!"):
        with pytest.raises(ValueError):
            parse_seed(bad)
        with pytest.raises(ValueError, match="LETHE_RECEIPT_SIGNING_KEY"):
            Settings(mode="embedded", receipt_signing_key=bad)


def test_embedded_mode_keeps_one_generated_key_and_production_needs_one(tmp_path: Path) -> None:
    first = Settings(mode="embedded", var_dir=tmp_path).effective_receipt_signing_key
    assert (
        first is not None
        and first == Settings(mode="embedded", var_dir=tmp_path).effective_receipt_signing_key
    )
    assert (tmp_path / "receipt_signing.key").stat().st_mode & 0o777 == 0o600
    # An empty value (a compose file's unset `${LETHE_RECEIPT_SIGNING_KEY:-}`) means unset.
    assert (
        Settings(mode="embedded", var_dir=tmp_path, receipt_signing_key="").effective_receipt_signing_key
        == first
    )
    production = Settings(
        mode="production",
        var_dir=tmp_path / "p",
        database_url="postgresql://x/y",
        redis_url="redis://x",
        subject_hash_key="k" * 32,
    )
    assert production.effective_receipt_signing_key is None
    configured = new_seed()
    assert Settings(
        mode="embedded", receipt_signing_key=configured
    ).effective_receipt_signing_key == parse_seed(configured)


def test_the_command_line_verifier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    signer = ReceiptSigner(parse_seed(new_seed()))
    receipt = {**PAYLOAD, "key_id": signer.key_id, "model_id": 1, "completed_at": "2026-11-21T00:00:00Z"}
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps({"receipt": receipt, "signature": signer.sign(receipt)}))
    public = b64url(signer.public_key)
    assert receipts_cli(["verify", str(path), f"--public-key={public}"]) == 0
    assert "valid" in capsys.readouterr().out

    path.write_text(json.dumps({"receipt": {**receipt, "model_id": 2}, "signature": signer.sign(receipt)}))
    assert receipts_cli(["verify", str(path), f"--public-key={public}"]) == 1
    other = b64url(ReceiptSigner(parse_seed(new_seed())).public_key)
    assert receipts_cli(["verify", str(path), f"--public-key={other}"]) == 1
    assert "names key" in capsys.readouterr().out
    path.write_text("{not json")
    assert receipts_cli(["verify", str(path), f"--public-key={public}"]) == 2
    assert receipts_cli(["new-key"]) == 0
    assert len(parse_seed(capsys.readouterr().out.strip())) == 32


def test_a_public_key_that_begins_with_a_dash_is_taken(tmp_path: Path) -> None:
    """base64url has '-' in its alphabet: one key in 64 begins with it, which argparse would read as an
    option after a space; the documented form is --public-key=KEY."""
    signer = next(
        s
        for s in (ReceiptSigner(parse_seed(new_seed())) for _ in range(10_000))
        if b64url(s.public_key)[0] == "-"
    )
    receipt = {
        "key_id": signer.key_id,
        "request_id": 1,
        "model_id": 1,
        "completed_at": "2026-11-21T00:00:00Z",
    }
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps({"receipt": receipt, "signature": signer.sign(receipt)}))
    assert receipts_cli(["verify", str(path), f"--public-key={b64url(signer.public_key)}"]) == 0


def test_processes_starting_at_once_keep_one_generated_key(tmp_path: Path) -> None:
    """Each Settings stands for a process generating its key on first use; all must end with one."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = list(
            pool.map(
                lambda _: Settings(mode="embedded", var_dir=tmp_path).effective_receipt_signing_key, range(16)
            )
        )
    assert len(set(keys)) == 1 and keys[0] is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["receipt_signing.key"]  # no drafts left


def test_retired_keys_are_public_keys_listed_with_commas() -> None:
    keys = [b64url(ReceiptSigner(parse_seed(new_seed())).public_key) for _ in range(2)]
    settings = Settings(mode="embedded", receipt_retired_keys=f" {keys[0]},{keys[1]} , {keys[0]},")
    assert settings.retired_receipt_keys == [parse_public_key(k) for k in keys]  # in order, once each
    assert Settings(mode="embedded", receipt_retired_keys="").retired_receipt_keys == []
    for bad in ("short", f"{keys[0]},{b64url(b'x' * 31)}", "!!!"):
        with pytest.raises(ValueError, match="LETHE_RECEIPT_RETIRED_KEYS"):
            Settings(mode="embedded", receipt_retired_keys=bad)


def test_the_verifier_takes_the_key_the_receipt_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = (ReceiptSigner(parse_seed(new_seed())) for _ in range(2))
    receipt = {**PAYLOAD, "key_id": old.key_id, "model_id": 1, "completed_at": "2026-11-21T00:00:00Z"}
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps({"receipt": receipt, "signature": old.sign(receipt)}))
    both = [f"--public-key={b64url(k.public_key)}" for k in (new, old)]
    assert receipts_cli(["verify", str(path), *both]) == 0
    assert old.key_id in capsys.readouterr().out
    assert receipts_cli(["verify", str(path), f"--public-key= {b64url(old.public_key)}\n"]) == 0  # pasted
    assert receipts_cli(["verify", str(path), both[0]]) == 1
    assert f"names key {old.key_id}, the keys given are {new.key_id}" in capsys.readouterr().out
    # A receipt that claims the new key's id but carries the old key's signature does not verify.
    forged = {**receipt, "key_id": new.key_id}
    path.write_text(json.dumps({"receipt": forged, "signature": old.sign(forged)}))
    assert receipts_cli(["verify", str(path), *both]) == 1
