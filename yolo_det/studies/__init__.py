"""Seed studies: one training command under N seeds, the spread of its metrics, two studies compared.

``study`` runs and resumes a study (``study.json``), ``statistics`` the paired tests and intervals,
``compare`` two studies (with set-up causes), ``plot`` their figures. Imports ``core``, ``record``, ``proof``.
"""
