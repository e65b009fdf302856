"""``yolo-det attest RUN_DIR``, ``yolo-det attest verify DIR`` and ``yolo-det reproduce DIR``: signed provenance
of a run, checked offline, and the training re-derived from it (docs/attest.md)."""

from __future__ import annotations

import argparse
import sys

from .exit_codes import EXIT_USAGE
from .output import print_json

VERIFY_HELP = ("check a bundle offline: the signatures, the weights against the attested digest and model "
               "signature, a data folder against the manifest, the statements against each other")


def register(sub) -> None:
    """Add ``attest`` (with its ``verify``) and ``reproduce`` to the ``yolo-det`` parser."""
    p = sub.add_parser(
        "attest", help="sign a strict/warn run's provenance (SLSA, in-toto, CycloneDX ML-BOM, model signature)",
        description=(
            "yolo-det attest RUN_DIR --key KEY.pem --out DIR: write a signed bundle of a finished strict/warn run:\n"
            "  model.sig               the weights' OpenSSF model signature (model-signing)\n"
            "  provenance.intoto.json  SLSA Provenance v1: command, settings, mode, seeds, data and code digests,\n"
            "                          machine, the record's final digest, the fingerprint log as byproduct\n"
            "  test-*.intoto.json      one in-toto Test Result per verdict (self-attested: the run's own record;\n"
            "                          reproduced: a second run bit-identical, --reproduced-by / --evidence)\n"
            "  bom.cdx.json            a CycloneDX 1.7 ML-BOM (model card, data, formulation), signed as bom.intoto.json\n"
            "yolo-det attest verify DIR --key PUB.pem [--weights W] [--data ROOT]: " + VERIFY_HELP + ".\n"
            "Signing modes: --key KEY.pem (offline; verify with --key PUB.pem); --cert CERT.pem [--cert-chain\n"
            "  CHAIN.pem] --key KEY.pem (offline, your CA's signing certificate; verify with --cert-chain ROOT.pem);\n"
            "  --sigstore (keyless: an OIDC identity and network; verify with --identity EMAIL --issuer URL).\n"
            "Keys: openssl ecparam -name prime256v1 -genkey -noout -out key.pem; openssl ec -in key.pem -pubout -out "
            "pub.pem. See docs/attest.md."),
        epilog="exit codes: attest: 0 written, 2 bad input or no signing identity (nothing written); verify: 0 "
               "verified, 1 a mismatch named (a signer not trusted among them), 2 bad input",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run folder (or 'verify' to check a bundle)")
    p.add_argument("bundle", nargs="?", metavar="DIR", help="with verify: the bundle folder")
    p.add_argument("--key", metavar="PEM",
                   help="attest: the private key that signs (with --cert: the certificate's key); verify: the public "
                        "key to check with")
    p.add_argument("--cert", metavar="PEM", help="attest: sign with this X.509 signing certificate (its key: --key); "
                                                 "the envelopes and the model signature carry it")
    p.add_argument("--cert-chain", metavar="PEM", action="append", default=[],
                   help="attest: the certificates between --cert and your CA's root, carried in the bundle; verify: "
                        "the CA certificates you trust (the signing certificate must chain to them, valid now); "
                        "repeatable")
    p.add_argument("--sigstore", action="store_true",
                   help="attest: sign keylessly through Sigstore (an OIDC identity: $SIGSTORE_ID_TOKEN, a CI's ambient "
                        "credential or the browser sign-in; needs network)")
    p.add_argument("--identity", metavar="EMAIL", help="verify: the Sigstore identity that must have signed (with "
                                                       "--issuer)")
    p.add_argument("--issuer", metavar="URL", help="verify: the OIDC issuer of that identity, e.g. "
                                                   "https://accounts.google.com")
    p.add_argument("--out", metavar="DIR", help="attest: the bundle folder to write (new or empty)")
    p.add_argument("--weights", metavar="PT", help="the weights file (attest default: weights/best.pt, else last.pt; "
                                                   "verify default: the path the bundle was made from)")
    p.add_argument("--data", metavar="ROOT", help="verify: the data folder to check against the attested digests")
    p.add_argument("--evidence", metavar="JSON", action="append", default=[],
                   help="attest: a verdict saved from diff/verify/val/parity/compare --json (repeatable)")
    p.add_argument("--reproduced-by", metavar="RUN", action="append", default=[],
                   help="attest: a second run of the same command (folder or fingerprint log), compared now")
    p.add_argument("--password-env", metavar="VAR", help="attest: the environment variable holding the key's password")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_attest)

    r = sub.add_parser(
        "reproduce", help="re-run an attested training here and compare its record with the attested one",
        description=(
            "Re-run the training a bundle attests, from its provenance alone (command, settings, mode, environment\n"
            "variables), after checking the data against the attested digests, and compare the new fingerprint log\n"
            "with the attested one step by step: bit-identical writes a 'reproduced' Test Result signed with --key;\n"
            "otherwise the first divergence and its likely cause (another torch, CPU instruction set, GPU)."),
        epilog="exit codes: 0 reproduced bit-identically, 1 differs (named), 2 bad input, 3 not proven",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("bundle", metavar="DIR", help="the bundle folder written by yolo-det attest")
    r.add_argument("--workdir", metavar="DIR", default="yolo-det-reproduce",
                   help="where the re-run writes (default: yolo-det-reproduce)")
    r.add_argument("--data", metavar="ROOT", help="the data folder here (default: the attested data root)")
    r.add_argument("--cwd", metavar="DIR", help="the training code's folder here (default: the attested one)")
    r.add_argument("--verify-key", metavar="PUB", help="check the bundle's signatures with this public key first")
    r.add_argument("--key", metavar="PEM", help="sign the 'reproduced' statement with this private key")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(func=_reproduce)


def _fail(command: str, message: str) -> int:
    print(f"yolo-det {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _attest(args: argparse.Namespace) -> int:
    import os

    from ..attest.bundle import attest_run, verify_bundle
    from ..attest.signing import AttestError

    try:
        if args.run_dir == "verify":
            if not args.bundle:
                return _fail("attest verify", "name the bundle folder: yolo-det attest verify DIR --key PUB.pem")
            if args.cert or args.sigstore:
                return _fail("attest verify", "--cert and --sigstore are for signing: verify with --key "
                                              "PUB.pem, --cert-chain ROOT.pem or --identity EMAIL --issuer URL")
            result = verify_bundle(args.bundle, args.key, weights=args.weights, data_root=args.data,
                                   cert_chain=args.cert_chain, identity=args.identity, issuer=args.issuer)
            if args.json:
                return print_json(result.to_json(), result.verdict)
            for line in result.checked:
                print(f"  checked: {line}")
            for line in result.mismatches:
                print(f"  mismatch: {line}")
            print(f"{result.verdict}: {args.bundle}")
            return result.exit_code
        if args.bundle:
            return _fail("attest", f"unexpected argument {args.bundle!r} (did you mean: yolo-det attest verify "
                                   f"{args.bundle}?)")
        if not args.out:
            return _fail("attest", "--out DIR is required: the folder the bundle is written to")
        password = os.environ.get(args.password_env) if args.password_env else None
        if args.identity or args.issuer:
            return _fail("attest", "--identity/--issuer check a Sigstore signature: give them to yolo-det attest verify")
        result = attest_run(args.run_dir, args.key, args.out, weights=args.weights, evidence=args.evidence,
                            reproduced=args.reproduced_by, password=password, cert=args.cert,
                            cert_chain=args.cert_chain, sigstore=args.sigstore)
    except AttestError as exc:
        return _fail("attest", f"{exc}")
    from ..trackers import log_files

    taken = log_files(args.run_dir, result.out, "attestation", echo=lambda line: print(line, file=sys.stderr))
    if args.json:
        return print_json({**result.to_json(), "trackers": taken}, result.verdict)
    if taken:
        print(f"yolo-det attest: the bundle is attached to the run's {', '.join(taken)} run")
    print(f"yolo-det attest: wrote {len(result.files)} files to {result.out}: {', '.join(result.files)}")
    for test in result.tests:
        print(f"  test result: {test}")
    return result.exit_code


def _reproduce(args: argparse.Namespace) -> int:
    from ..attest.reproduce import reproduce
    from ..attest.signing import AttestError

    try:
        result = reproduce(args.bundle, workdir=args.workdir, data_root=args.data, cwd=args.cwd,
                           verify_key=args.verify_key, key=args.key,
                           progress=lambda m: print(f"yolo-det reproduce: {m}", file=sys.stderr, flush=True))
    except AttestError as exc:
        return _fail("reproduce", str(exc))
    if args.json:
        return print_json(result.to_json(), result.verdict)
    for line in result.lines:
        print(line)
    print(f"reproduce: {result.verdict}" + (f" (statement: {result.statement})" if result.statement else ""))
    return result.exit_code
