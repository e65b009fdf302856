"""What the tests share that is not a fixture: builders of fake run artefacts (``builders``: fingerprint logs, run
folders, checkpoints), the in-process CLI (``cli``), verify's helpers (``verify``), the cluster marks (``cluster``),
and the helpers of one capability's tests (``alerts``, ``coco``, ``compat``, ``injectors``, ``locate``, ``patch``,
``portable``, ``world``). A test file imports from here (and ``conftest``), never from another test file."""
