"""The weights' OpenSSF model signature (``model-signing``): a Sigstore bundle over a manifest of per-file
SHA-256 digests, signed with the user's key; it verifies with ``model_signing verify key`` as well as here."""

from __future__ import annotations

import os
from pathlib import Path

from ..core import extras
from .signing import AttestError, Mismatch


def _model_signing():
    try:
        import OpenSSL  # noqa: F401 - model-signing 1.1 imports it without declaring it
        from model_signing import signing, verifying
    except ImportError as exc:
        raise AttestError(f"signing the weights needs {exc.name}: {extras.install_hint('attest')}") from None
    return signing, verifying


def sign(weights: os.PathLike, private_key: os.PathLike, signature: os.PathLike) -> Path:
    """Sign ``weights`` (a file) with the PEM key; write the Sigstore bundle to ``signature``."""
    signing, _ = _model_signing()
    try:
        signing.Config().use_elliptic_key_signer(private_key=Path(private_key)).sign(Path(weights), Path(signature))
    except (ValueError, OSError) as exc:
        raise AttestError(f"model-signing could not sign {weights}: {exc}") from None
    return Path(signature)


def verify(weights: os.PathLike, public_key: os.PathLike, signature: os.PathLike) -> None:
    """Check ``weights`` against the model signature; :class:`Mismatch` naming the file when a byte changed or
    another key signed it."""
    _, verifying = _model_signing()
    if not Path(signature).is_file():
        raise AttestError(f"{signature}: no model signature")
    try:
        verifying.Config().use_elliptic_key_verifier(public_key=Path(public_key)).verify(Path(weights),
                                                                                        Path(signature))
    except ValueError as exc:
        raise Mismatch(f"{Path(weights).name}: the model signature does not verify ({str(exc).splitlines()[0][:200]})"
                       ) from None
    except OSError as exc:
        raise AttestError(f"cannot read {exc.filename}: {exc.strerror}") from None


__all__ = ["sign", "verify"]
