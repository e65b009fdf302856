"""What a run is configured as: the bottom layer, importing nothing else of yolo-det.

Owns: ``mode`` (resolving strict/warn/off and its sources), ``determinism`` (the global flags,
snapshot/restore, scoped contexts), ``seeding``, ``report`` (recorded nondeterminism alerts),
``environment`` (the manifest of versions and variables), ``env_names`` (the name of every ``YOLO_DET_*``
variable, spelled once), ``search`` (the seeds of hyperparameter
searches), ``active`` (the current session slot),
``processes`` (launching a command in its own process group; signals reach all of it), ``verdicts`` (the
words of every command's JSON ``verdict`` field, their exit codes and the ``schema`` version), ``extras``
(how to install an optional feature's packages, named in messages), ``atomic`` (the one atomic file writer), ``rng`` (the process's
random generators, read and set in one place),
``data_manifest`` (the data a run read, by content; the one set of image suffixes).
"""
