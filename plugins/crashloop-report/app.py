"""crashloop-report: a kinformer plugin in Python that reports, per
deployment, the pods stuck in CrashLoopBackOff.

On every pod delta it finds the pod's deployment in the host's cache (pod to
ReplicaSet to Deployment, by their controller ownerReferences), lists the
deployment's pods with its label selector, and logs when the set of pods
stuck changes:

    WARN deployment shop/web: 2 of 3 pods in CrashLoopBackOff: web-5d8-x2 (12 restarts), web-5d8-q7 (4 restarts)
    INFO deployment shop/web: no pods in CrashLoopBackOff

Each delta is logged at DEBUG as delta-logger logs it, an update with the
resourceVersion of its previous state (``Updated Pod ns/name rv=12 (was
rv=11)``). Build: ``guest-sdk/python/build plugins/crashloop-report OUT.wasm``.
"""

import kinformer
from kinformer import Gvk, Registration

PODS = Gvk("", "v1", "Pod")
REPLICA_SETS = Gvk("apps", "v1", "ReplicaSet")
DEPLOYMENTS = Gvk("apps", "v1", "Deployment")


class CrashLoopReport(kinformer.Handler):
    def init(self, config):
        # Deployment key -> {pod name: restarts} last reported.
        self.stuck = {}
        return (
            Registration("crashloop-report", "0.1.0")
            .watch(PODS)
            .cache(REPLICA_SETS)
            .cache(DEPLOYMENTS)
        )

    def handle(self, delta):
        initial = " (initial list)" if delta.is_initial_list else ""
        # An update's previous state, fetched from the host only when read.
        old = delta.old_value
        previous = f" (was rv={old['metadata']['resourceVersion']})" if old else ""
        kinformer.debug(f"{delta.type} {delta.gvk.kind} {delta.key} rv={delta.resource_version}{previous}{initial}")
        deployment = deployment_of(delta.namespace, delta.value)
        if deployment is None:
            return
        key = f"{delta.namespace}/{deployment['metadata']['name']}"
        pods = kinformer.list_objects(PODS, namespace=delta.namespace, label_selector=selector(deployment))
        stuck = {pod["metadata"]["name"]: restarts for pod in pods if (restarts := crash_looping(pod)) is not None}
        if stuck == self.stuck.get(key, {}):
            return
        self.stuck[key] = stuck
        if stuck:
            names = ", ".join(f"{name} ({restarts} restarts)" for name, restarts in sorted(stuck.items()))
            kinformer.warn(f"deployment {key}: {len(stuck)} of {len(pods)} pods in CrashLoopBackOff: {names}")
        else:
            kinformer.info(f"deployment {key}: no pods in CrashLoopBackOff")


def controller(obj):
    """The (kind, name) of the object's controller ownerReference, if any."""
    for owner in obj["metadata"].get("ownerReferences", []):
        if owner.get("controller"):
            return owner["kind"], owner["name"]
    return None


def deployment_of(namespace, pod):
    """The cached Deployment that controls the pod through its ReplicaSet."""
    owner = controller(pod)
    if owner is None or owner[0] != "ReplicaSet":
        return None
    replica_set = kinformer.get(REPLICA_SETS, f"{namespace}/{owner[1]}")
    owner = replica_set and controller(replica_set)
    if owner is None or owner[0] != "Deployment":
        return None
    return kinformer.get(DEPLOYMENTS, f"{namespace}/{owner[1]}")


def selector(deployment):
    """The deployment's spec.selector as a label selector string."""
    spec = deployment["spec"].get("selector", {})
    terms = [f"{k}={v}" for k, v in sorted(spec.get("matchLabels", {}).items())]
    for expression in spec.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        terms.append({
            "In": f"{key} in ({','.join(values)})",
            "NotIn": f"{key} notin ({','.join(values)})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }[operator])
    return ",".join(terms)


def crash_looping(pod):
    """The pod's restart count when a container waits in CrashLoopBackOff."""
    statuses = pod.get("status", {}).get("containerStatuses", [])
    if any(s.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff" for s in statuses):
        return sum(s.get("restartCount", 0) for s in statuses)
    return None


WitWorld = kinformer.plugin(CrashLoopReport)
