"""How to install what an optional feature needs, from this installation's own metadata.

yolo-det is installed from its repository: an extra named by the distribution's name (``yolo-det[ray]``) would
send pip to an index for a package of that name. A message names the extra's packages themselves
(``pip install 'ray>=2.9'``) and the checkout's ``pip install -e '.[ray]'``.
"""

from __future__ import annotations

import shlex
from importlib import metadata
from typing import List

DISTRIBUTION = "yolo-det"


def requirements(extra: str) -> List[str]:
    """The requirements of ``extra`` as setup.cfg declares them (``['ray>=2.9']``); [] where the metadata is missing."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for line in declared:
        requirement, _, marker = line.partition(";")
        if marker.replace(" ", "").replace("'", '"') == f'extra=="{extra}"':
            out.append(requirement.strip())
    return out


def install_hint(extra: str) -> str:
    """``pip install 'ray>=2.9' (or, in a yolo-det checkout, pip install -e '.[ray]')``: what to run for ``extra``."""
    checkout = f"pip install -e '.[{extra}]'"
    packages = requirements(extra)
    if not packages:
        return f"{checkout} in the yolo-det repository"
    return f"pip install {' '.join(shlex.quote(p) for p in packages)} (or, in a yolo-det checkout, {checkout})"
