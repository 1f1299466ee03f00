"""{{name}}: a kinformer plugin that logs every delta it receives.

Its config (in {{name}}.toml) is a comma-separated list of resources to
watch, as apiVersion/Kind: ``v1/Pod,apps/v1/Deployment``.
"""

import kinformer
from kinformer import Gvk, Registration


class Plugin(kinformer.Handler):
    def init(self, config):
        registration = Registration("{{name}}", "0.1.0")
        for resource in filter(None, (r.strip() for r in config.split(","))):
            registration.watch(Gvk.parse(resource))
        return registration

    def handle(self, delta):
        # Every start, swap or settings change hands the plugin the whole
        # cache again as Added, flagged initial list: rebuild state from it,
        # but act on the outside world only for what changes after it.
        initial = " (initial list)" if delta.is_initial_list else ""
        kinformer.info(f"{delta.type} {delta.gvk.kind} {delta.key} rv={delta.resource_version}{initial}")


WitWorld = kinformer.plugin(Plugin)
