"""Keys and DSSE envelopes: every statement yolo-det attests is signed with the user's key, offline.

A statement is signed as a DSSE envelope (``application/vnd.in-toto+json``, securesystemslib's ``dsse``), the
format in-toto, SLSA and Sigstore verify; the weights are signed with OpenSSF's ``model-signing`` using the same key
(:mod:`yolo_det.attest.weights`). Keys are PEM files: an EC private key (``openssl ecparam -genkey``) to sign, its
public key (``openssl ec -pubout``) to verify. The certificate and Sigstore modes build on these
(:mod:`yolo_det.attest.signers`).
"""

from __future__ import annotations

import base64
import copy
import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from ..core import extras

#: The DSSE payload type of an in-toto statement.
PAYLOAD_TYPE = "application/vnd.in-toto+json"


class AttestError(ValueError):
    """Bad input to attest / verify / reproduce: a key, a bundle file or a run folder; the message says which."""


class Mismatch(Exception):
    """Evidence that does not match what was signed: a signature, a digest, a file; the message names it."""


def _modules() -> Tuple[Any, Any, Any]:
    try:
        from cryptography.hazmat.primitives import serialization
        from securesystemslib import dsse
        from securesystemslib.signer import CryptoSigner, SSlibKey
    except ImportError as exc:
        raise AttestError(f"attestation needs {exc.name or 'its packages'}: {extras.install_hint('attest')}") from None
    return serialization, dsse, (CryptoSigner, SSlibKey)


def load_signer(path: os.PathLike, password: Optional[str] = None) -> Any:
    """A signer for the PEM private key at ``path`` (its ``public_key.keyid`` names it in every envelope)."""
    serialization, _, (CryptoSigner, _) = _modules()
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AttestError(f"cannot read the private key {path}: {exc.strerror or exc}") from None
    try:
        key = serialization.load_pem_private_key(data, password.encode() if password else None)
        return CryptoSigner(key)
    except (ValueError, TypeError, Exception) as exc:  # noqa: BLE001 - cryptography raises several types
        raise AttestError(f"{path} is not a PEM private key yolo-det can sign with ({exc}); make one with "
                          "`openssl ecparam -name prime256v1 -genkey -noout -out key.pem`") from None


def load_public_key(path: os.PathLike) -> Any:
    """The public key (securesystemslib ``SSlibKey``) in the PEM file at ``path``."""
    serialization, _, (_, SSlibKey) = _modules()
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AttestError(f"cannot read the public key {path}: {exc.strerror or exc}") from None
    try:
        return SSlibKey.from_crypto(serialization.load_pem_public_key(data))
    except (ValueError, TypeError, Exception) as exc:  # noqa: BLE001
        raise AttestError(f"{path} is not a PEM public key ({exc}); export it with "
                          "`openssl ec -in key.pem -pubout -out pub.pem`") from None


def public_pem(signer: Any) -> bytes:
    """The signer's public key as PEM (written beside a bundle so a reader knows which key to ask for)."""
    serialization, _, _ = _modules()
    return signer._private_key.public_key().public_bytes(  # noqa: SLF001 - CryptoSigner keeps the key
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def sign_statement(statement: Mapping[str, Any], signer: Any) -> Dict[str, Any]:
    """The DSSE envelope of ``statement`` signed by ``signer``."""
    _, dsse, _ = _modules()
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")
    envelope = dsse.Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(signer)
    return envelope.to_dict()


def envelope_of(document: Any) -> Any:
    """The DSSE envelope of a statement file: the file itself, or the ``dsseEnvelope`` of a Sigstore bundle
    (``--sigstore``); for reading a payload without checking it."""
    if isinstance(document, Mapping) and isinstance(document.get("dsseEnvelope"), Mapping):
        return document["dsseEnvelope"]
    return document


def open_envelope(envelope: Any, key: Any, name: str) -> Dict[str, Any]:
    """The statement inside a DSSE envelope, after checking its signature with ``key``; :class:`Mismatch` naming
    ``name`` when another key signed it or the payload was changed, :class:`AttestError` when it is no envelope."""
    _, dsse, _ = _modules()
    if not isinstance(envelope, Mapping) or not isinstance(envelope.get("payload"), str) \
            or not isinstance(envelope.get("signatures"), list):
        raise AttestError(f"{name} is not a DSSE envelope (payload, payloadType, signatures)")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise AttestError(f"{name}: payload type {envelope.get('payloadType')!r}, expected {PAYLOAD_TYPE}")
    try:
        parsed = dsse.Envelope.from_dict(copy.deepcopy(dict(envelope)))  # from_dict pops the fields it reads
    except Exception as exc:  # noqa: BLE001 - malformed base64 / fields
        raise AttestError(f"{name} is not a readable DSSE envelope ({exc})") from None
    try:
        parsed.verify([key], 1)
    except Exception:  # noqa: BLE001 - securesystemslib's VerificationError and its relatives
        signers = ", ".join(str(s.get("keyid", "?"))[:16] for s in envelope["signatures"] if isinstance(s, Mapping))
        raise Mismatch(f"{name}: the signature does not verify with the given key {key.keyid[:16]} (signed by "
                       f"{signers or 'no one'}): the statement was changed after signing, or another key signed "
                       "it") from None
    try:
        statement = json.loads(base64.b64decode(envelope["payload"]))
    except ValueError as exc:
        raise AttestError(f"{name}: the payload is not JSON ({exc})") from None
    if not isinstance(statement, dict):
        raise AttestError(f"{name}: the payload is not an in-toto statement")
    return statement


__all__ = ["AttestError", "Mismatch", "PAYLOAD_TYPE", "envelope_of", "load_public_key", "load_signer", "open_envelope",
           "public_pem", "sign_statement"]
