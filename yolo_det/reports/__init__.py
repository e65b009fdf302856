"""The HTML report: one self-contained page of what a set of inputs proves (``yolo-det report``).

Modules: ``inputs`` (what each input is, told by its content), ``timeline`` (a training run's record: steps,
epochs, validations, resume points, mode, seeds, environment, alerts), ``divergence`` (two runs: the first
divergence or "identical", from :mod:`yolo_det.proof`), ``seeds`` (seed studies: per-seed points, the mean, the
95% interval, two studies' verdict), ``evaluations`` (export parity's table, the COCO gap as a waterfall),
``charts`` (inline SVG), ``blocks`` (HTML pieces), ``page`` (the document and its atomic write).
"""
