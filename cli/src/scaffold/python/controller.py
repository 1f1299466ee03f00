"""{{name}}: a kinformer controller that reconciles every object of one
resource, logging each.

Its config (in {{name}}.toml) is the resource it reconciles, as
apiVersion/Kind: ``v1/Pod`` or ``apps/v1/Deployment``.
"""

import json

import kinformer
from kinformer import Action, ControllerRegistration, Gvk


class Reconciler(kinformer.Controller):
    def init(self, config):
        self.primary = Gvk.parse(config)
        return ControllerRegistration("{{name}}", "0.1.0", self.primary)

    def reconcile(self, request):
        found = kinformer.get(self.primary, request.key)
        if found is None:
            kinformer.info(f"reconcile {request.key}: gone")
        else:
            kinformer.info(f"reconcile {request.key}: {len(json.dumps(found))} bytes")
        return Action.done()


WitWorld = kinformer.controller(Reconciler)
