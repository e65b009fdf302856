"""The certificate and Sigstore modes of ``yolo-det attest``: a bundle signed with a CA-issued certificate verifies
against the CA (``attest verify --cert-chain ROOT.pem``) here and with the upstream ``model_signing verify
certificate``; a leaf of another CA, an expired leaf, a statement re-signed by another certificate and a key-signed
bundle are refused, naming why; the chain verdict agrees with model-signing's (the oracle) over generated CA trees.
``--sigstore`` is tested only where it can be offline: without an identity, or without network, it fails in one
line, writing nothing."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

pytest.importorskip("model_signing")
pytest.importorskip("in_toto_attestation")
pytest.importorskip("cyclonedx")

from support.attest import certificate, keypair, synthetic_run  # noqa: E402
from support.cli import cli  # noqa: E402
from yolo_det.attest import certificates, signers, signing  # noqa: E402

MODEL_SIGNING = Path(sys.executable).with_name("model_signing")


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    """A CA (root -> leaf), another CA with its own leaf, a synthetic strict run and its certificate-signed bundle."""
    root = tmp_path_factory.mktemp("certs")
    ca_root = certificate(root, "root-ca", ca=True, days=(-10, 3650))
    leaf = certificate(root, "leaf", ca_root[:2])
    other = certificate(root, "other-ca", ca=True, days=(-10, 3650))
    stranger = certificate(root, "stranger", other[:2])
    run = synthetic_run(root)
    proc = cli("attest", run, "--cert", leaf[3], "--key", leaf[2], "--out", root / "bundle")
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "run": run, "ca": ca_root, "leaf": leaf, "other": other, "stranger": stranger,
            "bundle": root / "bundle", "weights": run / "weights" / "best.pt"}


def _verify(bundle, *args):
    proc = cli("attest", "verify", bundle, "--json", *args)
    return proc, json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None


def _upstream(weights, signature, chain) -> subprocess.CompletedProcess:
    return subprocess.run([str(MODEL_SIGNING), "verify", "certificate", str(weights), "--signature", str(signature),
                           "--certificate_chain", str(chain)], capture_output=True, text=True)


def _payload(path: Path) -> dict:
    return json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))


def test_a_certificate_signed_bundle_verifies_against_its_ca_here_and_upstream(ca):
    bundle = ca["bundle"]
    leaf_pem = ca["leaf"][3].read_text()
    for path in bundle.glob("*.intoto.json"):  # every envelope carries the signing certificate
        assert [s["cert"] for s in json.loads(path.read_text())["signatures"]] == [leaf_pem]
    index = json.loads((bundle / "attestation.json").read_text())
    assert index["signing"]["mode"] == "certificate" and index["signing"]["certificate"] == "CN=leaf"
    proc, result = _verify(bundle, "--cert-chain", ca["ca"][3], "--data", ca["root"] / "data")
    assert proc.returncode == 0 and result["verdict"] == "verified", proc.stdout + proc.stderr
    assert "CN=leaf" in result["checked"][0] and str(ca["ca"][3]) in result["checked"][0]
    assert any("model signature verifies" in line for line in result["checked"])
    upstream = _upstream(ca["weights"], bundle / "model.sig", ca["ca"][3])
    assert upstream.returncode == 0, upstream.stdout + upstream.stderr


def test_a_leaf_of_another_ca_is_refused_naming_it(ca, tmp_path):
    stranger = ca["stranger"]
    proc = cli("attest", ca["run"], "--cert", stranger[3], "--key", stranger[2], "--out", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    proc, result = _verify(tmp_path / "b", "--cert-chain", ca["ca"][3])
    assert proc.returncode == 1 and result["verdict"] == "differs"
    assert "CN=stranger" in result["mismatches"][0] and "issued by CN=other-ca" in result["mismatches"][0]
    assert "does not chain" in result["mismatches"][0] and "CN=root-ca" in result["mismatches"][0]
    assert _upstream(ca["weights"], tmp_path / "b" / "model.sig", ca["ca"][3]).returncode != 0  # the oracle agrees
    proc, result = _verify(tmp_path / "b", "--cert-chain", ca["other"][3])  # its own CA trusts it
    assert proc.returncode == 0, proc.stdout


def test_an_expired_leaf_cannot_sign_and_its_bundle_is_refused(ca, tmp_path, monkeypatch):
    expired = certificate(tmp_path, "expired", ca["ca"][:2], days=(-30, -1))
    out = tmp_path / "b"
    proc = cli("attest", ca["run"], "--cert", expired[3], "--key", expired[2], "--out", out)
    assert proc.returncode == 2 and "expired on" in proc.stderr and not out.exists()
    # a bundle signed while it was valid: the signing-time check skipped, as it passed then
    monkeypatch.setattr(certificates, "check_signing_pair", lambda *a: None)
    assert cli("attest", ca["run"], "--cert", expired[3], "--key", expired[2], "--out", out).returncode == 0
    monkeypatch.undo()
    proc, result = _verify(out, "--cert-chain", ca["ca"][3])
    assert proc.returncode == 1 and "CN=expired" in result["mismatches"][0]
    assert "expired on" in result["mismatches"][0]


def test_a_password_protected_certificate_key_signs_and_leaves_no_open_copy(ca, tmp_path):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(ca["leaf"][2].read_bytes(), None)
    locked = tmp_path / "locked.pem"
    locked.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(b"secret")))
    out = tmp_path / "b"
    proc = cli("attest", ca["run"], "--cert", ca["leaf"][3], "--key", locked, "--password-env", "LEAF_PW", "--out", out,
               env={**os.environ, "LEAF_PW": "secret"})
    assert proc.returncode == 0, proc.stderr
    assert not list(out.glob("*unlocked*")) and "PRIVATE KEY" not in "".join(p.read_text() for p in out.iterdir())
    assert _verify(out, "--cert-chain", ca["ca"][3])[0].returncode == 0


def test_a_key_signed_bundle_is_refused_by_a_ca_and_a_certificate_bundle_by_a_bare_key(ca, tmp_path):
    key, pub = keypair(tmp_path, "owner")
    assert cli("attest", ca["run"], "--key", key, "--out", tmp_path / "k").returncode == 0
    proc, result = _verify(tmp_path / "k", "--cert-chain", ca["ca"][3])
    assert proc.returncode == 1 and "no certificate" in result["mismatches"][0]
    assert "--key PUB.pem" in result["mismatches"][0]
    proc, result = _verify(ca["bundle"], "--key", ca["bundle"] / "key.pub.pem")
    assert proc.returncode == 1 and any("--cert-chain" in m and "CN=leaf" in m for m in result["mismatches"])


def test_a_statement_re_signed_by_another_certificate_is_refused(ca, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(ca["bundle"], bundle)
    path = bundle / "provenance.intoto.json"
    sibling = certificate(tmp_path, "sibling", ca["ca"][:2])  # the same CA: its chain is fine
    path.write_text(json.dumps(signers.CertificateSigner(sibling[2], sibling[3]).sign_statement(_payload(path))))
    proc, result = _verify(bundle, "--cert-chain", ca["ca"][3])
    assert proc.returncode == 1 and "provenance.intoto.json" in result["mismatches"][0]
    assert "CN=sibling" in result["mismatches"][0] and "CN=leaf" in result["mismatches"][0]
    # the bundle's own certificate attached to a signature by another key
    envelope = signing.sign_statement(_payload(path), signing.load_signer(sibling[2]))
    for sig in envelope["signatures"]:
        sig["cert"] = ca["leaf"][3].read_text()
    path.write_text(json.dumps(envelope))
    proc, result = _verify(bundle, "--cert-chain", ca["ca"][3])
    assert proc.returncode == 1 and "does not verify" in result["mismatches"][0]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 50), target=st.sampled_from(["payload", "cert"]), position=st.floats(0, 1, exclude_max=True),
       bit=st.integers(0, 6))
def test_a_flipped_bit_verifies_only_where_the_signed_bytes_are_unchanged(ca, tmp_path_factory, which, target,
                                                                          position, bit):
    from cryptography import x509

    bundle = tmp_path_factory.mktemp("flip") / "bundle"
    shutil.copytree(ca["bundle"], bundle)
    files = sorted(bundle.glob("*.intoto.json"))
    path = files[which % len(files)]
    envelope = json.loads(path.read_text())
    unchanged = False
    if target == "payload":
        payload = bytearray(base64.b64decode(envelope["payload"]))
        payload[int(position * len(payload))] ^= 1 << bit
        envelope["payload"] = base64.b64encode(bytes(payload)).decode()
    else:  # the carried certificate's PEM text: a changed certificate, or text that parses to the same one
        pem = bytearray(envelope["signatures"][0]["cert"].encode())
        pem[int(position * len(pem))] ^= 1 << bit
        envelope["signatures"][0]["cert"] = pem.decode("latin-1")
        try:
            unchanged = x509.load_pem_x509_certificate(bytes(pem)) == ca["leaf"][1]
        except (ValueError, x509.InvalidVersion):
            unchanged = False
    path.write_text(json.dumps(envelope))
    proc, result = _verify(bundle, "--cert-chain", ca["ca"][3])
    assert proc.returncode == (0 if unchanged else 1), (target, proc.stdout, proc.stderr)
    if not unchanged:
        assert path.name in result["mismatches"][0]


def test_bad_certificate_inputs_are_refused_before_anything_is_written(ca, tmp_path):
    out = tmp_path / "out"
    key, _ = keypair(tmp_path, "unrelated")
    cases = [(("--cert", ca["leaf"][3], "--key", key), "not the certificate of the private key"),
             (("--cert", ca["leaf"][3]), "--key KEY.pem"),
             (("--cert-chain", ca["ca"][3], "--key", key), "give the certificate with --cert"),
             (("--cert", tmp_path / "unrelated.pub.pem", "--key", key), "no PEM certificate"),
             ((), "name how to sign")]
    no_usage = certificate(tmp_path, "nousage", ca["ca"][:2], usage=False)
    cases.append((("--cert", no_usage[3], "--key", no_usage[2]), "allows no signing"))
    for args, message in cases:
        proc = cli("attest", ca["run"], *args, "--out", out)
        assert proc.returncode == 2 and message in proc.stderr and not out.exists(), (args, proc.stderr)
    for args in ((), ("--key", ca["bundle"] / "key.pub.pem", "--cert-chain", ca["ca"][3]), ("--identity", "a@b.c")):
        proc = cli("attest", "verify", ca["bundle"], *args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["unrelated.pem", "unrelated.pub.pem", "nousage.pem", "nousage.key.pem"])  # no staging folder left


def _tree(folder: Path, shape: str, days: tuple):
    """A trusted root and a signing leaf of ``shape``: issued by the root, through an intermediate, by another CA,
    self-signed, or by the root without a signing usage; the leaf valid over ``days``. Returns (root cert path,
    leaf key path, leaf cert path, the intermediates' paths)."""
    root = certificate(folder, "root", ca=True, days=(-1000, 3650))  # the CAs valid over every leaf's start
    if shape == "intermediate":
        middle = certificate(folder, "middle", root[:2], ca=True, days=(-900, 3650))
        leaf = certificate(folder, "leaf", middle[:2], days=days)
        return root[3], leaf[2], leaf[3], [middle[3]]
    if shape == "other-ca":
        issuer = certificate(folder, "other", ca=True, days=(-1000, 3650))[:2]
    elif shape == "self-signed":
        issuer = None
    else:
        issuer = root[:2]
    leaf = certificate(folder, "leaf", issuer, days=days, usage=shape != "no-usage")
    return root[3], leaf[2], leaf[3], []


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(["direct", "intermediate", "other-ca", "self-signed", "no-usage"]),
       start=st.integers(-400, 2), length=st.integers(1, 500))
def test_the_chain_verdict_agrees_with_model_signing(tmp_path_factory, shape, start, length):
    from model_signing import signing as upstream_signing, verifying

    folder = tmp_path_factory.mktemp("tree")
    root, key, leaf, chain = _tree(folder, shape, (start, start + length))
    model = folder / "model.bin"
    model.write_bytes(b"weights" * 100)
    upstream_signing.Config().use_certificate_signer(private_key=key, signing_certificate=leaf,
                                                     certificate_chain=chain or [leaf]).sign(model, folder / "m.sig")
    try:
        verifying.Config().use_certificate_verifier(certificate_chain=[root]).verify(model, folder / "m.sig")
        upstream = True
    except Exception:  # noqa: BLE001 - model-signing raises ValueError or OpenSSL's store errors
        upstream = False
    envelope = signing.sign_statement({"_type": "https://in-toto.io/Statement/v1"}, signing.load_signer(key))
    for sig in envelope["signatures"]:
        sig["cert"] = leaf.read_text()
    (folder / "certificate.pem").write_text(leaf.read_text() + "".join(p.read_text() for p in chain))
    verifier = signers.CertificateVerifier([root])
    verifier.prepare(folder)
    try:
        verifier.open(envelope, "statement")
        ours = True
    except signing.Mismatch as exc:
        ours, why = False, str(exc)
    valid_now = start <= 0 < start + length
    # model-signing checks the chain at the leaf's start; yolo-det also at the moment of verification
    assert ours == (upstream and valid_now), (shape, start, length, upstream, None if ours else why)
    if not ours:
        assert "CN=leaf" in why


def test_sigstore_without_an_identity_fails_in_one_line_and_writes_nothing(ca, tmp_path, monkeypatch):
    import sigstore.oidc

    for name in ("SIGSTORE_ID_TOKEN", "GITHUB_ACTIONS", "ACTIONS_ID_TOKEN_REQUEST_URL", "GITLAB_CI", "BUILDKITE",
                 "CIRCLECI", "GOOGLE_SERVICE_ACCOUNT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sigstore.oidc, "detect_credential", lambda *a, **k: None)  # no CI's ambient identity here
    out = tmp_path / "out"
    for env, message in ((None, "found none"), ("not-a-token", "could not get an identity")):
        if env:
            monkeypatch.setenv("SIGSTORE_ID_TOKEN", env)
        proc = cli("attest", ca["run"], "--sigstore", "--out", out)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert message in proc.stderr and "--key KEY.pem" in proc.stderr and "--cert CERT.pem" in proc.stderr
        assert not out.exists() and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no staging folder either
    proc = cli("attest", ca["run"], "--sigstore", "--key", ca["leaf"][2], "--out", out)
    assert proc.returncode == 2 and "without --key" in proc.stderr


def test_sigstore_with_an_identity_but_no_network_fails_in_one_line_and_writes_nothing(ca, tmp_path, monkeypatch):
    import time

    from sigstore.models import ClientTrustConfig

    def part(claims):
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()

    now = int(time.time())  # an unsigned token with the claims sigstore reads before it goes online
    token = ".".join([part({"alg": "RS256"}), part({"iss": "https://issuer.example", "aud": "sigstore", "sub": "me",
                                                    "iat": now, "exp": now + 600}), "c2ln"])
    monkeypatch.setenv("SIGSTORE_ID_TOKEN", token)

    def offline(*args, **kwargs):
        raise ConnectionError("network is unreachable")  # as the TUF refresh fails with no network

    monkeypatch.setattr(ClientTrustConfig, "production", classmethod(offline))
    out = tmp_path / "out"
    proc = cli("attest", ca["run"], "--sigstore", "--out", out)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "cannot reach Sigstore" in proc.stderr and "--key KEY.pem" in proc.stderr and "--cert CERT.pem" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_bundle_without_sigstore_signatures_is_refused_by_an_identity_offline(ca):
    proc, result = _verify(ca["bundle"], "--identity", "owner@example.com", "--issuer", "https://accounts.google.com")
    assert proc.returncode == 1 and "not a Sigstore bundle" in result["mismatches"][0]
    assert "--cert-chain ROOT.pem" in result["mismatches"][0]
