"""X.509 for the certificate mode: read PEM certificates, check that a key belongs to its certificate, and verify
that a signing certificate chains to the certificates a verifier trusts.

The chain is verified with ``cryptography``'s path builder (the Web PKI's rules for the CAs, any extensions on the
signing certificate), at the time of verification: a bundle carries no trusted timestamp, so a certificate that has
expired (or is not valid yet) is refused. OpenSSF's ``model_signing`` checks its chain at the signing certificate's
start instead; both require a certificate usable for signing (key usage *digital signature*, or extended key usage
*code signing*).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence

from .signing import AttestError, Mismatch


def _x509() -> Any:
    from cryptography import x509

    return x509


def load(paths: Iterable[os.PathLike], what: str) -> List[Any]:
    """Every certificate in the PEM files at ``paths`` (a file may hold several); :class:`AttestError` naming a file
    that cannot be read or holds none."""
    x509 = _x509()
    out: List[Any] = []
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise AttestError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
        try:
            certs = x509.load_pem_x509_certificates(data)
        except (ValueError, x509.InvalidVersion) as exc:
            raise AttestError(f"{path} holds no PEM certificate ({exc}): give the {what} as PEM "
                              "(-----BEGIN CERTIFICATE-----)") from None
        out += certs
    return out


def from_pem(data: str, name: str) -> Any:
    """The one certificate of a PEM string carried in a bundle; :class:`Mismatch` naming ``name`` when it is none."""
    x509 = _x509()
    try:
        return x509.load_pem_x509_certificate(data.encode("ascii"))
    except (ValueError, UnicodeEncodeError, x509.InvalidVersion) as exc:
        raise Mismatch(f"{name}: the certificate it carries is not a PEM certificate ({exc})") from None


def pem(cert: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def describe(cert: Any) -> str:
    """``CN=leaf (issued by CN=Root CA, SHA-256 ab12cd34...)``: how a message names a certificate."""
    try:
        subject, issuer = cert.subject.rfc4514_string(), cert.issuer.rfc4514_string()
    except Exception:  # noqa: BLE001 - a malformed name is parsed lazily
        subject = issuer = "(unreadable name)"
    return f"{subject or '(empty subject)'} (issued by {issuer or '(empty issuer)'}, SHA-256 {fingerprint(cert)[:16]}...)"


def fingerprint(cert: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def can_sign(cert: Any) -> bool:
    """Whether the certificate allows signing: key usage *digital signature*, or extended key usage *code signing*
    (the rule ``model_signing`` applies)."""
    x509 = _x509()
    from cryptography.x509.oid import ExtendedKeyUsageOID

    try:
        if cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature:
            return True
    except x509.ExtensionNotFound:
        pass
    try:
        return ExtendedKeyUsageOID.CODE_SIGNING in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False


def validity_problem(cert: Any, at: Optional[dt.datetime] = None) -> Optional[str]:
    """Why ``cert`` is not valid at ``at`` (default now): expired or not yet valid; None when it is."""
    when = at or dt.datetime.now(dt.timezone.utc)
    if when > cert.not_valid_after_utc:
        return f"it expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if when < cert.not_valid_before_utc:
        return f"it is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    return None


def check_signing_pair(private_key: Any, cert: Any, cert_path: os.PathLike) -> None:
    """Refuse (:class:`AttestError`) a certificate that is not the key's, cannot sign, or is not valid now."""
    if private_key.public_key() != cert.public_key():
        raise AttestError(f"{cert_path} is not the certificate of the private key given with --key (its public key "
                          "differs): give the key the certificate was issued for")
    if not can_sign(cert):
        raise AttestError(f"{cert_path}: the certificate {describe(cert)} allows no signing (key usage 'digital "
                          "signature' or extended key usage 'code signing'): ask your CA for a signing certificate")
    problem = validity_problem(cert)
    if problem:
        raise AttestError(f"{cert_path}: the certificate {describe(cert)} cannot sign now: {problem}")


def verify_chain(leaf: Any, intermediates: Sequence[Any], trusted: Sequence[Any], trusted_name: str,
                 at: Optional[dt.datetime] = None) -> List[Any]:
    """The chain from ``leaf`` to one of the ``trusted`` certificates (through ``intermediates``, which are not
    trusted themselves), verified at ``at`` (default now); :class:`Mismatch` naming the certificate and why."""
    try:
        return _verify_chain(leaf, intermediates, trusted, trusted_name, at)
    except Mismatch:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed extension is read lazily: ValueError and its relatives
        raise Mismatch(f"the signing certificate {describe(leaf)} cannot be checked: {exc}") from None


def _verify_chain(leaf: Any, intermediates: Sequence[Any], trusted: Sequence[Any], trusted_name: str,
                  at: Optional[dt.datetime]) -> List[Any]:
    from cryptography.x509 import verification as v

    when = at or dt.datetime.now(dt.timezone.utc)
    problem = validity_problem(leaf, when)
    if problem:
        raise Mismatch(f"the signing certificate {describe(leaf)} is not valid: {problem} (no trusted timestamp "
                       "says when it signed; the owner re-attests with a current certificate)")
    if not can_sign(leaf):
        raise Mismatch(f"the signing certificate {describe(leaf)} allows no signing (key usage 'digital signature' "
                       "or extended key usage 'code signing')")
    builder = (v.PolicyBuilder().store(v.Store(list(trusted))).time(when)
               .extension_policies(ca_policy=v.ExtensionPolicy.webpki_defaults_ca(),
                                   ee_policy=v.ExtensionPolicy.permit_all()))
    try:
        return list(builder.build_client_verifier().verify(leaf, list(intermediates)).chain)
    except v.VerificationError as exc:
        roots = "; ".join(c.subject.rfc4514_string() for c in trusted)
        raise Mismatch(f"the signing certificate {describe(leaf)} does not chain to the trusted certificates in "
                       f"{trusted_name} ({roots}): {exc}") from None


__all__ = ["can_sign", "check_signing_pair", "describe", "fingerprint", "from_pem", "load", "pem", "validity_problem",
           "verify_chain"]
