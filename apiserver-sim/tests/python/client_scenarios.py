"""The official Python `kubernetes` client against the API server KUBECONFIG names.

Each step is what a controller written with the client does; a step that
fails raises, and the script prints one `ok STEP` line per step that passed.
"""

import sys
import threading
import time

from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException

config.load_kube_config()
api = client.ApiClient()
core = client.CoreV1Api(api)
apps = client.AppsV1Api(api)
NS = "python-client"


def ok(step):
    print("ok", step, flush=True)


version = client.VersionApi(api).get_code()
assert version.major == "1", version
ok("version")

core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
names = [ns.metadata.name for ns in core.list_namespace().items]
assert NS in names and "default" in names, names
ok("namespaces")

# A watch opened before the writes sees each of them, in order.
seen = []
ready = threading.Event()
listed = core.list_namespaced_config_map(NS)


def follow():
    stream = watch.Watch()
    ready.set()
    for event in stream.stream(
        core.list_namespaced_config_map,
        NS,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=10,
    ):
        seen.append((event["type"], event["object"].metadata.name, dict(event["object"].data or {})))
        if event["type"] == "DELETED":
            stream.stop()


watcher = threading.Thread(target=follow)
watcher.start()
ready.wait()
time.sleep(0.2)

created = core.create_namespaced_config_map(
    NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings", labels={"team": "a"}), data={"mode": "fast"})
)
assert created.metadata.resource_version and created.metadata.uid, created.metadata
got = core.read_namespaced_config_map("settings", NS)
assert got.data == {"mode": "fast"}, got.data
ok("create and read")

patched = core.patch_namespaced_config_map("settings", NS, {"data": {"mode": "safe"}})
assert patched.data == {"mode": "safe"}, patched.data
assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
ok("patch")

stale = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings", resource_version=created.metadata.resource_version), data={"mode": "lost"})
try:
    core.replace_namespaced_config_map("settings", NS, stale)
    raise AssertionError("a replace of a stale version succeeded")
except ApiException as error:
    assert error.status == 409, error
    assert "the object has been modified" in error.body, error.body
ok("conflict")

selected = core.list_config_map_for_all_namespaces(label_selector="team=a").items
assert [cm.metadata.name for cm in selected] == ["settings"], selected
ok("label selector")

try:
    core.read_namespaced_config_map("missing", NS)
    raise AssertionError("a missing object was found")
except ApiException as error:
    assert error.status == 404, error
ok("not found")

status = core.delete_namespaced_config_map("settings", NS)
assert status.kind in ("Status", "ConfigMap"), status
watcher.join(timeout=15)
assert [(kind, name) for kind, name, _ in seen] == [
    ("ADDED", "settings"),
    ("MODIFIED", "settings"),
    ("DELETED", "settings"),
], seen
ok("watch")

deployment = client.V1Deployment(
    metadata=client.V1ObjectMeta(name="web"),
    spec=client.V1DeploymentSpec(
        replicas=2,
        selector=client.V1LabelSelector(match_labels={"app": "web"}),
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "web"}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="nginx:1.27")]),
        ),
    ),
)
apps.create_namespaced_deployment(NS, deployment)
scale = apps.read_namespaced_deployment_scale("web", NS)
assert scale.spec.replicas == 2, scale
apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 3}})
assert apps.read_namespaced_deployment("web", NS).spec.replicas == 3
# A strategic merge patch adds a container beside the first, merged by name.
apps.patch_namespaced_deployment(
    "web", NS, {"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}}}}
)
containers = [c.name for c in apps.read_namespaced_deployment("web", NS).spec.template.spec.containers]
assert containers == ["web", "sidecar"], containers
ok("deployment and scale")

# The dynamic client discovers every resource before it reads one.
dyn = dynamic.DynamicClient(api)
deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
assert [d.metadata.name for d in deployments.get(namespace=NS).items] == ["web"]
nodes = dyn.resources.get(api_version="v1", kind="Node")
assert nodes.namespaced is False
ok("dynamic client")

core.delete_namespace(NS)
ok("delete namespace")
sys.exit(0)
