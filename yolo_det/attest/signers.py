"""How a bundle is signed, and how ``attest verify`` checks it: three modes, one interface.

- **key** (offline): an EC private key signs; the verifier trusts the owner's public key.
- **certificate** (offline): the private key of an X.509 signing certificate signs; every DSSE envelope carries the
  certificate (its signature's ``cert`` field, as in-toto's DSSE implementations write it) and the model signature
  carries it with the chain given; the verifier trusts a CA (``--cert-chain ROOT.pem``), never the bundle's certs.
- **sigstore** (keyless, online): an OIDC identity, a short-lived Fulcio certificate, Rekor's log
  (:mod:`yolo_det.attest.keyless`); the verifier names the identity and its issuer.

A signer gives ``sign_statement``, ``sign_weights``, the public files written beside the bundle and its line in the
index; a verifier gives ``open`` (a statement, after checking its envelope), ``verify_weights`` and ``describe``.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import certificates, signing, weights as model_signature
from .signing import AttestError, Mismatch

KEY, CERTIFICATE, SIGSTORE = "key", "certificate", "sigstore"
PUBLIC_KEY_FILE = "key.pub.pem"
CERTIFICATE_FILE = "certificate.pem"
#: how to choose a mode, for the messages that refuse a combination
ATTEST_MODES = "--key KEY.pem (a key), --cert CERT.pem --key KEY.pem (a certificate), or --sigstore (keyless)"
VERIFY_MODES = ("--key PUB.pem (a key-signed bundle), --cert-chain ROOT.pem (a certificate-signed one), or "
                "--identity EMAIL --issuer URL (a Sigstore-signed one)")


class KeySigner:
    """Signs with an EC private key (PEM); the weights with model-signing's elliptic-key signer."""

    mode = KEY

    def __init__(self, key: os.PathLike, password: Optional[str] = None) -> None:
        self.key_path = Path(key)
        self.password = password
        self.signer = signing.load_signer(key, password)
        self.keyid = self.signer.public_key.keyid

    def sign_statement(self, statement: Mapping[str, Any]) -> Dict[str, Any]:
        return signing.sign_statement(statement, self.signer)

    def _key_file(self, scratch: Path) -> Path:
        """model-signing reads unencrypted PEM: with a password, an unencrypted copy in ``scratch`` (0600)."""
        if not self.password:
            return self.key_path
        from cryptography.hazmat.primitives import serialization

        path = scratch / "key.unlocked.pem"
        path.write_bytes(self.signer._private_key.private_bytes(  # noqa: SLF001 - CryptoSigner keeps the key
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        os.chmod(path, 0o600)
        return path

    def sign_weights(self, weights: Path, signature: Path, scratch: Path) -> None:
        key = self._key_file(scratch)
        try:
            self._sign_weights(weights, key, signature)
        finally:
            if key != self.key_path:
                key.unlink(missing_ok=True)

    def _sign_weights(self, weights: Path, key: Path, signature: Path) -> None:
        model_signature.sign(weights, key, signature)

    def files(self) -> Dict[str, bytes]:
        return {PUBLIC_KEY_FILE: signing.public_pem(self.signer)}

    def index(self) -> Dict[str, Any]:
        return {"mode": self.mode, "keyid": self.keyid}


class CertificateSigner(KeySigner):
    """Signs with the private key of a signing certificate; each envelope and the model signature carry it."""

    mode = CERTIFICATE

    def __init__(self, key: os.PathLike, certificate: os.PathLike, chain: Sequence[os.PathLike] = (),
                 password: Optional[str] = None) -> None:
        super().__init__(key, password)
        self.cert_path = Path(certificate)
        self.cert = certificates.load([certificate], "signing certificate (--cert)")[0]
        certificates.check_signing_pair(self.signer._private_key, self.cert, certificate)  # noqa: SLF001
        self.chain_paths = [Path(p) for p in chain]
        self.chain = certificates.load(self.chain_paths, "certificate chain (--cert-chain)")

    def sign_statement(self, statement: Mapping[str, Any]) -> Dict[str, Any]:
        envelope = super().sign_statement(statement)
        for sig in envelope["signatures"]:
            sig["cert"] = certificates.pem(self.cert)
        return envelope

    def _sign_weights(self, weights: Path, key: Path, signature: Path) -> None:
        # model-signing 1.1 cannot sign with an empty chain (it parses the joined chain files, b"", as PEM): the
        # certificate then stands as its own chain, an extra copy a verifier skips
        model_signature.sign_certificate(weights, key, self.cert_path, self.chain_paths or [self.cert_path], signature)

    def files(self) -> Dict[str, bytes]:
        pem = "".join(certificates.pem(c) for c in [self.cert] + self.chain)
        return {**super().files(), CERTIFICATE_FILE: pem.encode("ascii")}

    def index(self) -> Dict[str, Any]:
        return {**super().index(), "certificate": self.cert.subject.rfc4514_string(),
                "issuer": self.cert.issuer.rfc4514_string(), "sha256": certificates.fingerprint(self.cert)}


class KeyVerifier:
    """Trusts one public key: each envelope and the model signature must verify with it."""

    def __init__(self, public_key: os.PathLike) -> None:
        self.path = Path(public_key)
        self.key = signing.load_public_key(public_key)

    def prepare(self, folder: Path) -> None:
        """Read what the bundle carries for the check (nothing, for a key)."""

    def open(self, envelope: Any, name: str) -> Dict[str, Any]:
        return signing.open_envelope(envelope, self.key, name)

    def verify_weights(self, weights: Path, signature: Path) -> None:
        leaf = _model_signature_certificate(signature)
        if leaf is not None:
            raise Mismatch(f"{signature.name}: signed with the certificate {certificates.describe(leaf)}, not a bare "
                           "key: verify a certificate-signed bundle with --cert-chain ROOT.pem (the CA you trust)")
        model_signature.verify(weights, self.path, signature)

    def describe(self) -> str:
        return f"key {self.key.keyid[:16]}"


class CertificateVerifier:
    """Trusts the CA certificates given: every envelope must carry one signing certificate that chains to them
    (valid now), and verify with its key; the model signature too (checked by model-signing, and its certificate
    must be the envelopes')."""

    def __init__(self, trusted: Sequence[os.PathLike]) -> None:
        self.paths = [Path(p) for p in trusted]
        self.trusted = certificates.load(self.paths, "trusted certificate chain (--cert-chain)")
        self.name = ", ".join(str(p) for p in self.paths)
        self.intermediates: List[Any] = []
        self.leaf: Optional[Any] = None
        self._key: Optional[Any] = None

    def prepare(self, folder: Path) -> None:
        """The certificates the bundle carries beside its signing certificate: candidates for the chain only."""
        path = folder / CERTIFICATE_FILE
        if path.is_file():
            try:
                self.intermediates = certificates.load([path], "bundle's certificate file")[1:]
            except AttestError:
                self.intermediates = []

    def open(self, envelope: Any, name: str) -> Dict[str, Any]:
        sigs = envelope.get("signatures") if isinstance(envelope, Mapping) else None
        if not isinstance(sigs, list):
            raise AttestError(f"{name} is not a DSSE envelope (payload, payloadType, signatures)")
        pems = [s["cert"] for s in sigs if isinstance(s, Mapping) and isinstance(s.get("cert"), str)]
        if not pems:
            signers = ", ".join(str(s.get("keyid", "?"))[:16] for s in sigs if isinstance(s, Mapping))
            raise Mismatch(f"{name}: signed by key {signers or '(none)'} with no certificate: a bundle made with "
                           "--key alone; verify it with the owner's public key (--key PUB.pem), or ask for one signed "
                           f"with a certificate that chains to {self.name}")
        leaf = certificates.from_pem(pems[0], name)
        if self.leaf is None:
            try:
                certificates.verify_chain(leaf, self.intermediates, self.trusted, self.name)
            except Mismatch as exc:
                raise Mismatch(f"{name}: {exc}") from None
            self.leaf = leaf
            self._key = _sslib_key(leaf.public_key())
        elif leaf != self.leaf:
            raise Mismatch(f"{name}: signed by the certificate {certificates.describe(leaf)}, the bundle's other "
                           f"statements by {certificates.describe(self.leaf)}")
        return signing.open_envelope(envelope, self._key, name)

    def verify_weights(self, weights: Path, signature: Path) -> None:
        model_signature.verify_certificate(weights, self.paths, signature)
        leaf = _model_signature_certificate(signature)
        if self.leaf is not None and leaf != self.leaf:
            raise Mismatch(f"{signature.name}: signed by the certificate "
                           f"{certificates.describe(leaf) if leaf is not None else '(none)'}, the statements by "
                           f"{certificates.describe(self.leaf)}")

    def describe(self) -> str:
        who = certificates.describe(self.leaf) if self.leaf is not None else "(none)"
        return f"certificate {who}, chained to {self.name}"


def _sslib_key(public_key: Any) -> Any:
    from securesystemslib.signer import SSlibKey

    return SSlibKey.from_crypto(public_key)


def _model_signature_certificate(signature: Path) -> Optional[Any]:
    """The signing certificate a model signature (Sigstore bundle JSON) carries, or None."""
    from cryptography import x509

    try:
        doc = json.loads(signature.read_text(encoding="utf-8"))
        raw = doc["verificationMaterial"]["x509CertificateChain"]["certificates"][0]["rawBytes"]
        return x509.load_der_x509_certificate(base64.b64decode(raw))
    except (OSError, ValueError, KeyError, IndexError, TypeError, x509.InvalidVersion):
        return None


def for_attest(*, key: Optional[os.PathLike] = None, cert: Optional[os.PathLike] = None,
               cert_chain: Sequence[os.PathLike] = (), sigstore: bool = False, password: Optional[str] = None,
               identity_token: Optional[str] = None) -> Any:
    """The signer the options name; :class:`AttestError` saying what to give when they name none or several."""
    if sigstore:
        if key or cert or cert_chain:
            raise AttestError(f"--sigstore signs keylessly: give it without --key/--cert/--cert-chain (choose one of "
                              f"{ATTEST_MODES})")
        from .keyless import SigstoreSigner

        return SigstoreSigner(identity_token)
    if cert_chain and not cert:
        raise AttestError("--cert-chain names the chain of a signing certificate: give the certificate with --cert")
    if not key:
        raise AttestError(f"name how to sign: {ATTEST_MODES}" if not cert else
                          "--cert needs the certificate's private key: --key KEY.pem")
    return CertificateSigner(key, cert, cert_chain, password) if cert else KeySigner(key, password)


def for_verify(*, key: Optional[os.PathLike] = None, cert_chain: Sequence[os.PathLike] = (),
               identity: Optional[str] = None, issuer: Optional[str] = None) -> Any:
    """The verifier for the trust the options name: exactly one of a key, a CA chain, a Sigstore identity."""
    given = [name for name, value in (("--key", key), ("--cert-chain", cert_chain),
                                      ("--identity/--issuer", identity or issuer)) if value]
    if len(given) != 1:
        raise AttestError(f"name one trust to verify with ({'given: ' + ', '.join(given) if given else 'none given'}):"
                          f" {VERIFY_MODES}")
    if key:
        return KeyVerifier(key)
    if cert_chain:
        return CertificateVerifier(cert_chain)
    if not (identity and issuer):
        raise AttestError("a Sigstore signature is checked against an identity and its issuer: give both --identity "
                          "EMAIL and --issuer URL (e.g. https://accounts.google.com, "
                          "https://token.actions.githubusercontent.com)")
    from .keyless import SigstoreVerifier

    return SigstoreVerifier(identity, issuer)


__all__ = ["CERTIFICATE", "CERTIFICATE_FILE", "CertificateSigner", "CertificateVerifier", "KEY", "KeySigner",
           "KeyVerifier", "PUBLIC_KEY_FILE", "SIGSTORE", "for_attest", "for_verify"]
