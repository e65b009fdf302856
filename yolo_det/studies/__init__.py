"""Seed studies: one training command under N seeds, the spread of its metrics, two studies compared.

``study`` runs and resumes a study (``study.json``), ``statistics`` the paired tests and intervals,
``compare`` two studies (with set-up causes), ``plot`` their figures; ``executors`` runs the seeds (a local work
queue, or Ray), ``slurm`` as a SLURM job array, ``progress`` shows them. Imports ``core``, ``record``, ``proof``.
"""
