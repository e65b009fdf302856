"""What a run is configured as: the bottom layer, importing nothing else of yolo-det.

Owns: ``mode`` (resolving strict/warn/off and its sources), ``determinism`` (the global flags,
snapshot/restore, scoped contexts), ``seeding``, ``report`` (recorded nondeterminism alerts),
``environment`` (the manifest of versions and variables), ``env_names`` (the name of every ``YOLO_DET_*``
variable, spelled once), ``search`` (the seeds of hyperparameter
searches), ``active`` (the current session slot),
``processes`` (launching a command in its own process group; signals reach all of it), ``verdicts`` (the
words of every command's JSON ``verdict`` field, their exit codes and the ``schema`` version), ``extras``
(how to install an optional feature's packages, named in messages), ``roles`` (seeds by role: initialisation,
epoch order, augmentation), ``streams`` (per-sample random streams: batches as a function of seed, epoch, rank and
world size), ``data_manifest`` (every image and label a run used, by content; the one set of image suffixes), ``run_facts`` (what the release
decided at start-up), ``nms_limit`` (NMS wall-clock limits lifted), ``tensors`` (the tensors inside a nested
value), ``stack_trace`` (where code ran in a compiled graph), ``machine`` (the CPU and GPU a run computed on: the
instruction set each library dispatches to, the caps in force, GPU models and TF32), ``portable`` (the pins that make
a strict run's bits independent of the x86-64 CPU, and the check that each is in force), ``json_shapes`` (the shapes
of the JSON files a run writes and yolo-det reads back, and the check that names the field breaking one),
``atomic`` (the one atomic file writer), ``rng`` (the process's random generators, read and set in one place).
"""
