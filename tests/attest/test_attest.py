"""A model anyone can check and re-derive: ``yolo-det attest`` signs a strict run's provenance (SLSA v1, in-toto
Test Results, a CycloneDX ML-BOM, the weights' OpenSSF model signature), ``attest verify`` checks it offline and
refuses every tampering naming what changed, the upstream ``model_signing`` verifies the same signature, and
``yolo-det reproduce`` re-runs the training from the statement alone to a signed *reproduced* statement."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

pytest.importorskip("model_signing")
pytest.importorskip("in_toto_attestation")
pytest.importorskip("cyclonedx")


from support.attest import keypair, synthetic_run  # noqa: E402
from support.cli import cli  # noqa: E402
from support.verify import script_env  # noqa: E402
from yolo_det.attest import signing, statements  # noqa: E402

MODEL_SIGNING = Path(sys.executable).with_name("model_signing")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A synthetic strict run, a key pair, a second key pair and the run's bundle."""
    root = tmp_path_factory.mktemp("attest")
    run = synthetic_run(root)
    key, pub = keypair(root, "key")
    other_key, other_pub = keypair(root, "other")
    proc = cli("attest", run, "--key", key, "--out", root / "bundle")
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "run": run, "key": key, "pub": pub, "other_key": other_key, "other_pub": other_pub,
            "bundle": root / "bundle"}


def _copy_bundle(made, tmp_path) -> Path:
    dest = tmp_path / "bundle"
    shutil.copytree(made["bundle"], dest)
    return dest


def _verify(bundle, pub, *extra):
    proc = cli("attest", "verify", bundle, "--key", pub, "--json", *extra)
    return proc, json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None


def _payload(path: Path) -> dict:
    return json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))


def test_a_bundle_holds_each_statement_and_verifies(made):
    bundle = made["bundle"]
    names = sorted(p.name for p in bundle.iterdir())
    assert {"model.sig", "provenance.intoto.json", "bom.cdx.json", "bom.intoto.json", "fingerprint.jsonl",
            "attestation.json"} <= set(names)
    provenance = _payload(bundle / "provenance.intoto.json")
    statements.validate(provenance)  # in-toto-attestation's own protobuf schema and validator
    assert provenance["predicateType"] == "https://slsa.dev/provenance/v1"
    weights = made["run"] / "weights" / "best.pt"
    assert provenance["subject"][0]["digest"]["sha256"] == __import__("hashlib").sha256(weights.read_bytes()).hexdigest()
    external = provenance["predicate"]["buildDefinition"]["externalParameters"]
    assert external["mode"] == "strict" and external["seeds"]["init"] == 0 and external["command"][1] == "--data"
    data_deps = [d for d in provenance["predicate"]["buildDefinition"]["resolvedDependencies"]
                 if d["name"].startswith("data/")]
    assert len(data_deps) == 12  # 6 images + 6 labels, each by its digest
    test = _payload(next(bundle.glob("test-*.intoto.json")))
    assert test["predicateType"] == statements.TEST_RESULT and test["predicate"]["result"] == "PASSED"
    assert test["predicate"]["configuration"][0]["annotations"]["assurance"] == statements.SELF_ATTESTED
    proc, result = _verify(bundle, made["pub"], "--data", made["root"] / "data")
    assert proc.returncode == 0 and result["verdict"] == "verified" and result["mismatches"] == [], proc.stdout


def test_the_upstream_tools_accept_the_bundle(made):
    weights = made["run"] / "weights" / "best.pt"
    proc = subprocess.run([str(MODEL_SIGNING), "verify", "key", str(weights), "--signature",
                           str(made["bundle"] / "model.sig"), "--public_key", str(made["pub"])],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    bom = (made["bundle"] / "bom.cdx.json").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_7).validate_str(bom) is None
    doc = json.loads(bom)
    model = next(c for c in doc["components"] if c["type"] == "machine-learning-model")
    assert {m["type"] for m in model["modelCard"]["quantitativeAnalysis"]["performanceMetrics"]} == {
        "metrics/mAP_0.5", "metrics/mAP_0.5:0.95"}
    assert doc["formulation"][0]["workflows"][0]["outputs"] == [{"resource": {"ref": "model"}}]


def _flip(path: Path, offset: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1
    path.write_bytes(bytes(data))


def test_a_changed_byte_of_the_weights_is_refused_naming_them(made, tmp_path):
    weights = tmp_path / "best.pt"
    shutil.copyfile(made["run"] / "weights" / "best.pt", weights)
    _flip(weights)
    proc, result = _verify(made["bundle"], made["pub"], "--weights", weights)
    assert proc.returncode == 1 and result["verdict"] == "differs"
    assert any("SHA-256" in m and "best.pt" in m for m in result["mismatches"])
    assert any("model signature does not verify" in m for m in result["mismatches"])


def test_one_changed_label_file_is_named(made, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(made["root"] / "data", data)
    label = sorted((data / "labels" / "train").glob("*.txt"))[1]
    label.write_text(label.read_text() + "0 0.5 0.5 0.1 0.1\n")
    proc, result = _verify(made["bundle"], made["pub"], "--data", data)
    assert proc.returncode == 1
    assert any("1 data file(s) differ" in m and f"labels/train/{label.name}" in m for m in result["mismatches"])


def test_an_edited_statement_field_is_refused(made, tmp_path):
    bundle = _copy_bundle(made, tmp_path)
    path = bundle / "provenance.intoto.json"
    envelope = json.loads(path.read_text())
    stmt = _payload(path)
    stmt["predicate"]["buildDefinition"]["externalParameters"]["seeds"]["init"] = 1
    envelope["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    path.write_text(json.dumps(envelope))
    proc, result = _verify(bundle, made["pub"])
    assert proc.returncode == 1 and "provenance.intoto.json" in result["mismatches"][0]
    assert "does not verify" in result["mismatches"][0]


def test_a_statement_signed_by_another_key_is_refused(made, tmp_path):
    bundle = _copy_bundle(made, tmp_path)
    path = bundle / "provenance.intoto.json"
    signer = signing.load_signer(made["other_key"])
    path.write_text(json.dumps(signing.sign_statement(_payload(path), signer)))
    proc, result = _verify(bundle, made["pub"])
    assert proc.returncode == 1 and "provenance.intoto.json" in result["mismatches"][0]
    assert signer.public_key.keyid[:16] in result["mismatches"][0]  # names who did sign it


def test_weights_of_another_run_with_a_valid_signature_of_their_own_are_refused(made, tmp_path):
    from yolo_det.attest import weights as model_signature

    other = tmp_path / "best.pt"
    other.write_bytes(b"other weights" * 500)
    bundle = _copy_bundle(made, tmp_path)
    model_signature.sign(other, made["key"], bundle / "model.sig")  # the same key: a signature that verifies
    proc, result = _verify(bundle, made["pub"], "--weights", other)
    assert proc.returncode == 1
    assert any("SHA-256" in m and "the attested best.pt" in m for m in result["mismatches"])


def test_a_bom_edited_after_signing_is_refused(made, tmp_path):
    bundle = _copy_bundle(made, tmp_path)
    bom = json.loads((bundle / "bom.cdx.json").read_text())
    bom["components"][0]["name"] = "another.pt"
    (bundle / "bom.cdx.json").write_text(json.dumps(bom))
    proc, result = _verify(bundle, made["pub"])
    assert proc.returncode == 1 and any("bom.cdx.json" in m for m in result["mismatches"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(min_value=0, max_value=50), position=st.floats(0, 1, exclude_max=True),
       bit=st.integers(0, 7))
def test_no_flipped_bit_in_a_signed_payload_verifies(made, tmp_path_factory, which, position, bit):
    bundle = tmp_path_factory.mktemp("flip") / "bundle"
    shutil.copytree(made["bundle"], bundle)
    files = sorted(bundle.glob("*.intoto.json"))
    path = files[which % len(files)]
    envelope = json.loads(path.read_text())
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[int(position * len(payload))] ^= 1 << bit
    envelope["payload"] = base64.b64encode(bytes(payload)).decode()
    path.write_text(json.dumps(envelope))
    proc, result = _verify(bundle, made["pub"])
    assert proc.returncode in (1, 2) and "verified" not in proc.stdout.split('"verdict"')[-1][:20]


def test_bad_inputs_are_refused_and_nothing_is_written(made, tmp_path):
    assert cli("attest", "verify", tmp_path / "none", "--key", made["pub"]).returncode == 2
    assert cli("attest", "verify", made["bundle"], "--key", made["key"]).returncode == 2  # a private key
    out = tmp_path / "out"
    proc = cli("attest", made["run"], "--key", made["pub"], "--out", out)
    assert proc.returncode == 2 and "not a PEM private key" in proc.stderr and not out.exists()
    off = synthetic_run(tmp_path / "off", mode="off")
    proc = cli("attest", off, "--key", made["key"], "--out", out)
    assert proc.returncode == 2 and "only strict and warn" in proc.stderr and not out.exists()
    proc = cli("attest", made["run"], "--key", made["key"], "--out", made["bundle"])
    assert proc.returncode == 2 and "not an empty folder" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["off"]  # no staging folder left behind


def test_reproduce_checks_the_data_first_and_trains_nothing_on_changed_data(made, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(made["root"] / "data", data)
    image = sorted((data / "images" / "val").iterdir())[0]
    _flip(image, 200)
    proc = cli("reproduce", made["bundle"], "--data", data, "--workdir", tmp_path / "w", "--verify-key", made["pub"],
               "--json")
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["verdict"] == "differs"
    assert f"images/val/{image.name}" in result["details"][0] and "nothing was trained" in result["details"]
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_a_strict_yolov5_run_is_attested_verified_and_reproduced(yolov5_strict_verify, tmp_path, train_env,
                                                                  patched_yolov5):
    _, root = yolov5_strict_verify
    key, pub = keypair(tmp_path, "owner")
    third, third_pub = keypair(tmp_path, "reproducer")
    bundle = tmp_path / "bundle"
    proc = cli("attest", root / "runs" / "strict1", "--key", key, "--out", bundle,
               "--reproduced-by", root / "runs" / "strict2")
    assert proc.returncode == 0, proc.stderr
    tests = [_payload(p) for p in sorted(bundle.glob("test-*.intoto.json"))]
    assurance = {t["predicate"]["configuration"][0]["annotations"]["assurance"]: t["predicate"]["result"]
                 for t in tests}
    assert assurance == {"self-attested": "PASSED", "reproduced": "PASSED"}
    proc, result = _verify(bundle, pub)
    assert proc.returncode == 0 and result["verdict"] == "verified", proc.stdout
    weights = root / "runs" / "strict1" / "weights" / "best.pt"
    upstream = subprocess.run([str(MODEL_SIGNING), "verify", "key", str(weights), "--signature",
                               str(bundle / "model.sig"), "--public_key", str(pub)], capture_output=True, text=True)
    assert upstream.returncode == 0, upstream.stderr
    proc = cli("reproduce", bundle, "--workdir", tmp_path / "re", "--verify-key", pub, "--key", third, "--json",
               env=script_env(train_env))
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["verdict"] == "identical", proc.stdout + proc.stderr
    statement = signing.open_envelope(json.loads(Path(result["statement"]).read_text()),
                                      signing.load_public_key(third_pub), "reproduced")
    assert statement["predicate"]["result"] == "PASSED"
    assert statement["subject"] == _payload(bundle / "provenance.intoto.json")["subject"]
    assert (tmp_path / "re" / "runs" / "strict1" / "weights" / "best.pt").is_file()  # the outputs moved under --workdir
    assert not list((root / "runs").glob("strict1-*"))


@pytest.mark.slow
def test_an_ultralytics_run_is_attested_verified_and_reproduced(dataset, tmp_path, train_env):
    pytest.importorskip("ultralytics")
    yolo = Path(sys.executable).with_name("yolo")
    key, pub = keypair(tmp_path, "owner")
    cmd = [sys.executable, "-m", "yolo_det", "run", "--deterministic", "strict", "--", str(yolo), "train",
           "model=yolov8n.yaml", f"data={dataset}", "epochs=1", "imgsz=64", "batch=8", "workers=0", "plots=False",
           "device=cpu", "amp=False", "seed=0", f"project={tmp_path / 'runs'}", "name=u"]
    subprocess.run(cmd, cwd=tmp_path, env=script_env(train_env), check=True, capture_output=True)
    bundle = tmp_path / "bundle"
    assert cli("attest", tmp_path / "runs" / "u", "--key", key, "--out", bundle).returncode == 0
    proc, result = _verify(bundle, pub)
    assert proc.returncode == 0, proc.stdout
    upstream = subprocess.run([str(MODEL_SIGNING), "verify", "key", str(tmp_path / "runs" / "u" / "weights" / "best.pt"),
                               "--signature", str(bundle / "model.sig"), "--public_key", str(pub)],
                              capture_output=True, text=True)
    assert upstream.returncode == 0, upstream.stderr
    third, third_pub = keypair(tmp_path, "reproducer")
    proc = cli("reproduce", bundle, "--workdir", tmp_path / "re", "--verify-key", pub, "--key", third, "--json",
               env=script_env(train_env))
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["verdict"] == "identical", proc.stdout + proc.stderr
    assert (tmp_path / "re" / "runs" / "u" / "weights" / "last.pt").is_file()
    statement = signing.open_envelope(json.loads(Path(result["statement"]).read_text()),
                                      signing.load_public_key(third_pub), "reproduced")
    assert statement["predicate"]["result"] == "PASSED"
