"""config-reloader: a kinformer controller in Python that rolls a Deployment
out again when a ConfigMap it uses changes, as Stakater's Reloader does.

A deployment opts in with the annotation
``config-reloader.kinformer.dev/auto: "true"``. For each, the controller
hashes the ConfigMaps its pod template uses (as volumes, ``envFrom`` and
``env[].valueFrom``; a missing one counts as missing) and keeps the hash in
the deployment's annotation ``config-reloader.kinformer.dev/hash``:

- the first time it sees the deployment, it only records the hash;
- when the hash changes, it records the new one and writes it into the pod
  template's annotations too, which rolls the pods out, and records a
  ``Reloaded`` Event:

    INFO deployment shop/web: config maps settings changed: rolling out (hash 3f2a9c1e07b4d5a6)

A ConfigMap's change reaches the deployments that use it through three
indexes on the deployments' cache (one per place a pod template names a
ConfigMap), mapped from the ConfigMap's name. Its writes are a merge patch of
the deployment and an Event (``plugins/config-reloader/manifest.toml``).
Build: ``guest-sdk/python/build --world controller plugins/config-reloader OUT.wasm``.
"""

import hashlib
import json

import kinformer
from kinformer import Action, ControllerRegistration, Gvk, cluster
from kinformer.cluster import ObjectRef

DEPLOYMENTS = Gvk("apps", "v1", "Deployment")
CONFIG_MAPS = Gvk("", "v1", "ConfigMap")

OPT_IN = "config-reloader.kinformer.dev/auto"
HASH = "config-reloader.kinformer.dev/hash"

# Where a pod template names ConfigMaps: (index name, field path).
USES = [
    ("configmap-volumes", "spec.template.spec.volumes.configMap.name"),
    ("configmap-env-from", "spec.template.spec.containers.envFrom.configMapRef.name"),
    ("configmap-env", "spec.template.spec.containers.env.valueFrom.configMapKeyRef.name"),
]


class ConfigReloader(kinformer.Controller):
    def init(self, config):
        if config.strip():
            raise kinformer.PluginError(f"config-reloader takes no config, got {config!r}")
        registration = ControllerRegistration("config-reloader", "0.1.0", DEPLOYMENTS)
        for index, field_path in USES:
            registration.index(DEPLOYMENTS, index, field_path).maps(CONFIG_MAPS, index, "metadata.name")
        return registration

    def reconcile(self, request):
        deployment = kinformer.get(DEPLOYMENTS, request.key)
        if deployment is None:
            return Action.done()
        annotations = deployment["metadata"].get("annotations", {})
        if annotations.get(OPT_IN) != "true":
            return Action.done()
        names = config_maps_of(deployment)
        digest = config_hash(request.namespace, names)
        recorded = annotations.get(HASH)
        if recorded == digest:
            return Action.done()
        target = ObjectRef.from_key(DEPLOYMENTS, request.key)
        patch = {"metadata": {"annotations": {HASH: digest}}}
        if recorded is not None:
            # A changed hash: the template changes too, which rolls the pods out.
            patch["spec"] = {"template": {"metadata": {"annotations": {HASH: digest}}}}
        cluster.patch(target, patch)
        if recorded is None:
            kinformer.info(f"deployment {request.key}: watching config maps {', '.join(names) or '(none)'} (hash {digest})")
            return Action.done()
        note = f"config maps {', '.join(names)} changed: rolling out (hash {digest})"
        kinformer.info(f"deployment {request.key}: {note}")
        try:
            cluster.record_event(target, "Normal", "Reloaded", "Rollout", note)
        except cluster.WriteError as refused:
            # An Event is a courtesy: a refused one does not undo the rollout.
            kinformer.warn(f"deployment {request.key}: event not recorded: {refused}")
        return Action.done()


def config_maps_of(deployment):
    """The names of the ConfigMaps the deployment's pod template uses, sorted."""
    spec = deployment["spec"]["template"].get("spec", {})
    names = {volume["configMap"]["name"] for volume in spec.get("volumes", []) if "configMap" in volume}
    for container in spec.get("containers", []):
        names.update(
            source["configMapRef"]["name"] for source in container.get("envFrom", []) if "configMapRef" in source
        )
        names.update(
            env["valueFrom"]["configMapKeyRef"]["name"]
            for env in container.get("env", [])
            if "configMapKeyRef" in env.get("valueFrom", {})
        )
    return sorted(names)


def config_hash(namespace, names):
    """A short SHA-256 of the ConfigMaps' names and contents, as cached."""
    contents = []
    for name in names:
        config_map = kinformer.get(CONFIG_MAPS, f"{namespace}/{name}")
        if config_map is None:
            contents.append([name, None])
        else:
            contents.append([name, config_map.get("data", {}), config_map.get("binaryData", {})])
    text = json.dumps(contents, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


WitWorld = kinformer.controller(ConfigReloader)
