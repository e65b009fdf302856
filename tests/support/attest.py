"""What the attestation tests build: key pairs as openssl writes them, and a finished strict run folder made
without training (determinism.json, its fingerprint log, a data manifest, settings, results.csv, weights)."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from yolo_det.core import data_manifest
from yolo_det.record.log import LogWriter
from yolo_det.synthetic import make_dataset


def keypair(folder: Path, name: str) -> "tuple[Path, Path]":
    """A new EC P-256 key pair written as PEM (as `openssl ecparam -genkey` / `openssl ec -pubout` write them)."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def synthetic_run(root: Path, mode: str = "strict") -> Path:
    """A finished run folder as a patched YOLOv5 writes it, without training: determinism.json, the fingerprint
    log, the data manifest of a small synthetic dataset, opt.yaml, results.csv and weights (random bytes)."""
    data = make_dataset(root / "data", n_train=4, n_val=2, imgsz=64)
    run = root / "runs" / "exp"
    (run / "weights").mkdir(parents=True)
    (run / "weights" / "best.pt").write_bytes(bytes(range(256)) * 64)
    (run / "opt.yaml").write_text(f"data: {data}\nepochs: 1\nseed: 0\nlr0: 0.01\n")
    (run / "results.csv").write_text("epoch, metrics/mAP_0.5, metrics/mAP_0.5:0.95\n0, 0.5, 0.25\n")
    data_manifest.write(run, data_manifest.from_data_yaml(data))
    header = {"yolo_det": "0.1.0", "torch": "2.14.1", "rank": 0, "world_size": 1, "mode": mode, "seed": 0,
              "command": [str(root / "no-such-train.py"), "--data", str(data), "--project", str(root / "runs"),
                          "--name", "exp"],
              "cwd": str(root), "started": "2026-12-07T10:00:00+00:00", "env": {}, "files": []}
    writer = LogWriter(run / "fingerprint.jsonl", header)
    for step in (1, 2):
        writer.write_step(step, {"grad": (["w"], "0" * 32), "param": (["w"], "a" * 32)}, lr={"group0.lr": 0.01},
                          losses=[1.0])
    writer.write_final(2, ["model.w"], "c" * 32, "finish")
    writer.close()
    report = {"schema": 1, "yolo_det": "0.1.0", "mode": mode, "mode_source": "cli", "seed": 0,
              "seeds": {"run": 0, "init": 0, "order": 0, "augment": 0}, "steps": 2,
              "violations": {"ops": [], "total": 0}, "yolov5": {"script": str(root / "no-such-train.py")},
              "environment": {"torch": "2.14.1", "python": "3.11", "packages": {"yolov5": "7.0.14"}}}
    (run / "determinism.json").write_text(json.dumps(report))
    return run


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def certificate(folder: Path, name: str, issuer: "tuple | None" = None, *, ca: bool = False, days: "tuple" = (-1, 30),
                usage: bool = True) -> "tuple":
    """A new EC P-256 key and its certificate, written as ``NAME.key.pem`` / ``NAME.pem``: self-signed when
    ``issuer`` (a ``(key, cert)`` pair) is None, else issued by it; a CA (``ca``) or a signing leaf (key usage
    digital signature and code signing, unless ``usage`` is False); valid from ``days[0]`` to ``days[1]`` days from
    now. Returns ``(key, cert, key_path, cert_path)``."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    signer_key, signer_cert = issuer if issuer else (key, None)
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(name))
               .issuer_name(signer_cert.subject if signer_cert is not None else _name(name))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now + dt.timedelta(days=days[0])).not_valid_after(now + dt.timedelta(days=days[1]))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()),
                              critical=False))
    flags = dict(content_commitment=False, key_encipherment=False, data_encipherment=False, key_agreement=False,
                 encipher_only=False, decipher_only=False)
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=False, key_cert_sign=True, crl_sign=True,
                                                      **flags), critical=True)
    elif usage:
        builder = (builder.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                                       **flags), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False))
    cert = builder.sign(signer_key, hashes.SHA256())
    key_path, cert_path = folder / f"{name}.key.pem", folder / f"{name}.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, key_path, cert_path
