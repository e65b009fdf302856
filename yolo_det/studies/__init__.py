"""Seed studies: one training command under N seeds, the spread of its metrics, two studies compared.

``study`` runs and resumes a study (:func:`~.study.run_study`; the old import path of every name below),
``results`` what a study holds (``study.json``, ``study.csv``), ``metrics`` one seed's metrics, ``resumes`` a seed's
resumed attempts, ``taints`` why a seed did not run as its study says, ``decomposition`` each seed role's share of
the variance; ``statistics`` the paired tests and intervals, ``compare`` two studies (with set-up causes), ``plot``
their figures; ``executors`` (local work queue, Ray) and ``slurm`` where the seeds run, ``progress`` the board of
seeds. Imports ``core``, ``record``, ``proof``.
"""
