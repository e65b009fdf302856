"""``--sigstore``: keyless signing through Sigstore, for a user with an OIDC identity (a Google, GitHub or Microsoft
account, or a CI's workload identity) and network access to Sigstore's Fulcio and Rekor.

Each statement becomes a Sigstore bundle (v0.3) holding its DSSE envelope, the short-lived Fulcio certificate that
names the identity, and Rekor's log entry; the weights get model-signing's Sigstore signature. A verifier names the
identity and its issuer (``--identity EMAIL --issuer URL``). The identity token is, in this order: the
``SIGSTORE_ID_TOKEN`` variable (sigstore's own), an ambient CI credential, the browser sign-in when a terminal is
attached; with none of them, or no network, nothing is signed and the message says to sign offline with a key or a
certificate.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from . import weights as model_signature
from .signing import PAYLOAD_TYPE, AttestError, Mismatch

#: the variable sigstore-python's own CLI reads an identity token from
TOKEN_VARIABLE = "SIGSTORE_ID_TOKEN"
OFFLINE = "offline, sign with a key (--key KEY.pem) or a certificate (--cert CERT.pem --key KEY.pem)"


def _sigstore() -> Any:
    try:
        import sigstore.oidc  # noqa: F401 - model-signing depends on sigstore
        import sigstore.sign  # noqa: F401
    except ImportError as exc:
        from ..core import extras

        raise AttestError(f"--sigstore needs {exc.name}: {extras.install_hint('attest')}") from None
    return sigstore


def identity_token(explicit: Optional[str] = None, *, interactive: Optional[bool] = None) -> Any:
    """An OIDC identity token: ``explicit``, ``$SIGSTORE_ID_TOKEN``, an ambient CI credential, or (with a terminal)
    the browser sign-in; :class:`AttestError` naming what to do when there is none."""
    sigstore = _sigstore()
    raw = explicit or os.environ.get(TOKEN_VARIABLE)
    try:
        if not raw:
            raw = sigstore.oidc.detect_credential()
        if not raw and (sys.stdin.isatty() if interactive is None else interactive):
            from sigstore.models import ClientTrustConfig  # the browser sign-in at Sigstore's issuer (network)

            issuer = sigstore.oidc.Issuer(ClientTrustConfig.production().signing_config.get_oidc_url())
            return issuer.identity_token()
        if not raw:
            raise AttestError(f"--sigstore needs an OIDC identity and found none: no {TOKEN_VARIABLE}, no ambient CI "
                              f"credential, no terminal for the browser sign-in; {OFFLINE} (nothing written)")
        return sigstore.oidc.IdentityToken(raw)
    except AttestError:
        raise
    except Exception as exc:  # noqa: BLE001 - sigstore's IdentityError, IssuerError, network errors
        raise AttestError(f"--sigstore could not get an identity ({_first_line(exc)}); {OFFLINE} (nothing written)"
                          ) from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


class SigstoreSigner:
    """Signs every statement in one Sigstore signing session (one Fulcio certificate) and the weights with
    model-signing's Sigstore signer, under one identity token."""

    mode = "sigstore"

    def __init__(self, token: Optional[str] = None) -> None:
        self.token = identity_token(token)
        sigstore = _sigstore()
        from sigstore.models import ClientTrustConfig

        self._stack = contextlib.ExitStack()
        try:
            context = sigstore.sign.SigningContext.from_trust_config(ClientTrustConfig.production())
            self._signer = self._stack.enter_context(context.signer(self.token))
        except Exception as exc:  # noqa: BLE001 - TUF, network and Sigstore errors
            raise AttestError(f"--sigstore cannot reach Sigstore ({_first_line(exc)}): keyless signing needs network "
                              f"access to Sigstore's trust root, Fulcio and Rekor; {OFFLINE} (nothing written)") from None
        self.keyid = f"sigstore:{self.token.identity}"

    def sign_statement(self, statement: Mapping[str, Any]) -> Dict[str, Any]:
        from sigstore import dsse

        payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")
        try:
            bundle = self._signer.sign_dsse(dsse.Statement(payload))
        except Exception as exc:  # noqa: BLE001
            raise AttestError(f"Sigstore could not sign a statement ({_first_line(exc)}); {OFFLINE}") from None
        return json.loads(bundle.to_json())

    def sign_weights(self, weights: Path, signature: Path, scratch: Path) -> None:
        try:
            model_signature.sign_sigstore(weights, str(self.token), signature)
        except AttestError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise AttestError(f"Sigstore could not sign {weights.name} ({_first_line(exc)}); {OFFLINE}") from None

    def files(self) -> Dict[str, bytes]:
        return {}

    def index(self) -> Dict[str, Any]:
        return {"mode": self.mode, "identity": self.token.identity, "issuer": self.token.issuer}


class SigstoreVerifier:
    """Trusts Sigstore's public-good instance: each statement a Sigstore bundle whose certificate names the
    identity and issuer given, logged in Rekor; the weights by model-signing's Sigstore verifier."""

    def __init__(self, identity: str, issuer: str) -> None:
        self.identity, self.issuer = identity, issuer
        self._verifier: Optional[Any] = None

    def prepare(self, folder: Path) -> None:
        """Nothing: a Sigstore bundle carries its certificate and log entry."""

    def _get(self) -> Any:
        if self._verifier is None:
            _sigstore()
            from sigstore.verify import Verifier

            try:
                self._verifier = Verifier.production()
            except Exception as exc:  # noqa: BLE001 - TUF and network errors
                raise AttestError(f"Sigstore's trust root cannot be read ({_first_line(exc)}): verifying a "
                                  "Sigstore signature needs network access to Sigstore's TUF repository") from None
        return self._verifier

    def open(self, document: Any, name: str) -> Dict[str, Any]:
        if not isinstance(document, Mapping) or "dsseEnvelope" not in document:
            signers = ", ".join(str(s.get("keyid", "?"))[:16] for s in (document or {}).get("signatures") or []
                                if isinstance(s, Mapping)) if isinstance(document, Mapping) else ""
            raise Mismatch(f"{name}: not a Sigstore bundle but a DSSE envelope signed by key {signers or '(none)'}: "
                           "a bundle made with --key or --cert; verify it with --key PUB.pem or --cert-chain ROOT.pem")
        from sigstore.models import Bundle
        from sigstore.verify.policy import Identity

        try:
            bundle = Bundle.from_json(json.dumps(document))
        except Exception as exc:  # noqa: BLE001
            raise AttestError(f"{name}: not a readable Sigstore bundle ({_first_line(exc)})") from None
        try:
            kind, payload = self._get().verify_dsse(bundle, Identity(identity=self.identity, issuer=self.issuer))
        except AttestError:
            raise
        except Exception as exc:  # noqa: BLE001 - sigstore's VerificationError and its relatives
            raise Mismatch(f"{name}: the Sigstore signature does not verify for {self.identity} from {self.issuer} "
                           f"({_first_line(exc)})") from None
        if kind != PAYLOAD_TYPE:
            raise AttestError(f"{name}: payload type {kind!r}, expected {PAYLOAD_TYPE}")
        try:
            statement = json.loads(payload)
        except ValueError as exc:
            raise AttestError(f"{name}: the payload is not JSON ({exc})") from None
        if not isinstance(statement, dict):
            raise AttestError(f"{name}: the payload is not an in-toto statement")
        return statement

    def verify_weights(self, weights: Path, signature: Path) -> None:
        model_signature.verify_sigstore(weights, self.identity, self.issuer, signature)

    def describe(self) -> str:
        return f"Sigstore identity {self.identity} ({self.issuer})"


__all__ = ["SigstoreSigner", "SigstoreVerifier", "TOKEN_VARIABLE", "identity_token"]
