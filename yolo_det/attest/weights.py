"""The weights' OpenSSF model signature (``model-signing``): a Sigstore bundle over a manifest of per-file
SHA-256 digests, signed with the user's key, their certificate, or a Sigstore identity; it verifies with
``model_signing verify key`` / ``verify certificate`` / ``verify sigstore`` as well as here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

from ..core import extras
from .signing import AttestError, Mismatch


def _model_signing():
    try:
        import OpenSSL  # noqa: F401 - model-signing 1.1 imports it without declaring it
        from model_signing import signing, verifying
    except ImportError as exc:
        raise AttestError(f"signing the weights needs {exc.name}: {extras.install_hint('attest')}") from None
    return signing, verifying


def _sign(configure: Callable[[Any], Any], weights: os.PathLike, signature: os.PathLike) -> Path:
    signing, _ = _model_signing()
    try:
        configure(signing.Config()).sign(Path(weights), Path(signature))
    except (ValueError, OSError) as exc:
        raise AttestError(f"model-signing could not sign {weights}: {exc}") from None
    return Path(signature)


def sign(weights: os.PathLike, private_key: os.PathLike, signature: os.PathLike) -> Path:
    """Sign ``weights`` (a file) with the PEM key; write the Sigstore bundle to ``signature``."""
    return _sign(lambda c: c.use_elliptic_key_signer(private_key=Path(private_key)), weights, signature)


def sign_certificate(weights: os.PathLike, private_key: os.PathLike, certificate: os.PathLike,
                     chain: Sequence[os.PathLike], signature: os.PathLike) -> Path:
    """Sign ``weights`` with the key of ``certificate``; the bundle carries the certificate and ``chain``."""
    return _sign(lambda c: c.use_certificate_signer(private_key=Path(private_key), signing_certificate=Path(certificate),
                                                    certificate_chain=[Path(p) for p in chain]), weights, signature)


def sign_sigstore(weights: os.PathLike, identity_token: str, signature: os.PathLike) -> Path:
    """Sign ``weights`` keylessly through Sigstore (Fulcio, Rekor: network) with an OIDC identity token."""
    return _sign(lambda c: c.use_sigstore_signer(identity_token=identity_token), weights, signature)


def _verify(configure: Callable[[Any], Any], weights: os.PathLike, signature: os.PathLike) -> None:
    _, verifying = _model_signing()
    if not Path(signature).is_file():
        raise AttestError(f"{signature}: no model signature")
    try:
        config = configure(verifying.Config())
    except Exception as exc:  # noqa: BLE001 - a certificate file, or Sigstore's trust root (network) unavailable
        raise AttestError(f"model-signing cannot set up the verification: {exc}") from None
    try:
        config.verify(Path(weights), Path(signature))
    except OSError as exc:
        raise AttestError(f"cannot read {exc.filename}: {exc.strerror}") from None
    except Exception as exc:  # noqa: BLE001 - ValueError, OpenSSL's X509StoreContextError, sigstore's errors
        text = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise Mismatch(f"{Path(weights).name}: the model signature does not verify ({text})") from None


def verify(weights: os.PathLike, public_key: os.PathLike, signature: os.PathLike) -> None:
    """Check ``weights`` against the model signature; :class:`Mismatch` naming the file when a byte changed or
    another key signed it."""
    _verify(lambda c: c.use_elliptic_key_verifier(public_key=Path(public_key)), weights, signature)


def verify_certificate(weights: os.PathLike, trusted: Sequence[os.PathLike], signature: os.PathLike) -> None:
    """Check ``weights`` against a certificate-signed model signature whose certificate chains to ``trusted``."""
    _verify(lambda c: c.use_certificate_verifier(certificate_chain=[Path(p) for p in trusted]), weights, signature)


def verify_sigstore(weights: os.PathLike, identity: str, issuer: str, signature: os.PathLike) -> None:
    """Check ``weights`` against a Sigstore model signature made by ``identity`` as ``issuer`` vouched."""
    _verify(lambda c: c.use_sigstore_verifier(identity=identity, oidc_issuer=issuer), weights, signature)


__all__ = ["sign", "sign_certificate", "sign_sigstore", "verify", "verify_certificate", "verify_sigstore"]
