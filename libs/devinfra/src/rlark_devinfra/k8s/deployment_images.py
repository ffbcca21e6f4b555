"""Which product images (ADR 0023's OCI archives) the deployment test bed's nodes hold (ADR 0027).

The archives `make prereqs` built for the current sources (``product_images.require_built``). A developer
iterating while the working tree changes under them (every edit to a copied file is a new key) may name an
existing key with ``RLARK_DEPLOY_IMAGES_KEY`` (``product-images-<16 hex>``) instead; ``make test`` never does.
"""

from __future__ import annotations

import os

from rlark_devinfra import product_images

CONTROL_PLANE_CLUSTER = "lab"
"""The full cluster that runs the control plane (`testbed.FULL_CLUSTER_NAMES`); the others run agents."""


def product() -> product_images.Images:
    """The service and agent archives and the references they load as."""
    if key := os.environ.get("RLARK_DEPLOY_IMAGES_KEY"):
        found = product_images.images(key)
        if not found.service_tar.exists() or not found.agent_tar.exists():
            raise RuntimeError(f"RLARK_DEPLOY_IMAGES_KEY={key}: no archives under {found.root}")
        return found
    return product_images.require_built()
