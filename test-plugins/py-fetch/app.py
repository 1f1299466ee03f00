"""py-fetch: a plugin built with the Python SDK, for the tests. It watches
pods and, on its first batch, GETs the URL of its config with
:mod:`kinformer.http`, logging ``fetch STATUS BYTES``, or ``fetch error KIND:
MESSAGE`` when the request got no response. At ``init`` it logs
``env GREETING=VALUE`` from its environment (the manifest's ``[env]``).
Build: ``guest-sdk/python/build test-plugins/py-fetch OUT.wasm``.
"""

import os

import kinformer
from kinformer import Gvk, Registration, http


class Fetcher(kinformer.Handler):
    def init(self, config):
        self.url = config
        self.fetched = False
        kinformer.info(f"env GREETING={os.environ.get('GREETING')}")
        return Registration("py-fetch", "0.1.0").watch(Gvk("", "v1", "Pod"))

    def handle_batch(self, deltas):
        if self.fetched:
            return
        self.fetched = True
        try:
            response = http.get(self.url)
            kinformer.info(f"fetch {response.status} {len(response.body)}")
        except http.HttpError as error:
            kinformer.info(f"fetch error {error.kind}: {error.message}")


WitWorld = kinformer.plugin(Fetcher)
