"""The benchmark's no-op plugin in Python: what test-plugins/bench-probe is in
Rust with config ``noop``. It watches pods, declares the same index of pods by
node, and does nothing with a delta but receive it through the SDK.

Build: ``guest-sdk/python/build bench/plugins/noop-py OUT.wasm``.
"""

import kinformer
from kinformer import Gvk, PluginError, Registration

PODS = Gvk("", "v1", "Pod")


class Noop(kinformer.Handler):
    def init(self, config):
        if config not in ("", "noop"):
            raise PluginError(f"unknown mode {config!r}: this plugin only does noop")
        return Registration("bench-noop", "0.1.0").watch(PODS).index(PODS, "node", "spec.nodeName")

    def handle(self, delta):
        pass


WitWorld = kinformer.plugin(Noop)
