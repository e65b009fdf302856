"""Signed, offline-verifiable evidence of how a model was made, and its re-derivation (docs/attest.md).

Modules: ``signing`` (keys and DSSE envelopes), ``signers`` (the key, certificate and Sigstore modes of signing and
verifying), ``certificates`` (X.509 chains), ``keyless`` (Sigstore), ``run`` (what a run folder says, for an
attestation), ``statements`` (SLSA Provenance v1 and in-toto Test Result statements, checked against in-toto's
schema), ``mlbom`` (the CycloneDX ML-BOM: the model, its card, its data), ``weights`` (the OpenSSF model signature
of the weights), ``bundle`` (``yolo-det attest``: writing a bundle, and ``attest verify``: checking one),
``reproduce`` (re-running an attested training from its statement and comparing the new record with the attested
one).
"""
