"""Writes to the cluster, within the operator's write grant.

Every write is checked by the host against the plugin's write grant (in the
manifest beside the plugin; the default grant writes nothing), counted
against the plugin's write rate, logged in the host's audit and sent with the
plugin's name as field manager. In dry-run mode, set by the operator, the API
server validates each write and persists nothing; the answers look the same.

Writes need a plugin built for the ``writer`` or the ``controller`` world
(``build --world writer``); built for ``plugin``, every write raises
:class:`Denied`. Objects and patches are dicts (or JSON text); a missing
``apiVersion``, ``kind`` or ``metadata.name`` is filled in from the target.
Each write returns the object as stored, parsed::

    from kinformer import Gvk, cluster
    from kinformer.cluster import ObjectRef

    web = ObjectRef(Gvk("apps", "v1", "Deployment"), "shop", "web")
    # Scale through the scale subresource (needs patch on apps/v1/Deployment/scale).
    cluster.patch(ObjectRef(web.gvk, "shop", "web", subresource="scale"), {"spec": {"replicas": 3}})
    # Own a label with server-side apply.
    cluster.apply(web, {"metadata": {"labels": {"tier": "frontend"}}})
    # Tell people (needs create on events.k8s.io/v1/Event).
    cluster.record_event(web, "Normal", "Scaled", "Scale", "scaled to 3 replicas")

A refused write raises a :class:`WriteError` (a :class:`kinformer.PluginError`):
from ``handle`` or ``reconcile`` it fails the call, and the host retries.
"""

import json

from componentize_py_types import Err

from . import Gvk, PluginError

try:
    from wit_world.imports import cluster as _cluster
except ImportError:  # built for the `plugin` world, which cannot write
    _cluster = None

__all__ = [
    "ObjectRef", "WriteError", "Denied", "Forbidden", "Conflict", "NotFound", "Invalid",
    "Throttled", "Unavailable", "TooLarge", "create", "update", "patch", "apply", "delete",
    "record_event",
]


class WriteError(PluginError):
    """Why a write was not done; one of the subclasses below. :attr:`kind` is
    the host's name for it (``denied``, ``not-found``, ...)."""

    kind = "write-error"

    def __str__(self):
        return f"write {self.kind}: {super().__str__()}"


class Denied(WriteError):
    """Outside the plugin's write grant: nothing was sent."""

    kind = "denied"


class Forbidden(WriteError):
    """The API server refused it (its RBAC)."""

    kind = "forbidden"


class Conflict(WriteError):
    """A precondition failed: a stale resourceVersion or uid, an object that
    exists already, fields another manager owns."""

    kind = "conflict"


class NotFound(WriteError):
    """The object does not exist."""

    kind = "not-found"


class Invalid(WriteError):
    """The request was malformed, or the server rejected the object or patch."""

    kind = "invalid"


class Throttled(WriteError):
    """Over the plugin's write rate (or its event rate for one object), or the
    server asked to slow down. A controller's key is retried with backoff."""

    kind = "throttled"


class Unavailable(WriteError):
    """The server could not be reached in time or failed."""

    kind = "unavailable"


class TooLarge(WriteError):
    """The object or patch is too large (over 1 MiB, or the server's limit)."""

    kind = "too-large"


if _cluster is not None:
    _WRITE_ERRORS = {
        _cluster.WriteError_Denied: Denied,
        _cluster.WriteError_Forbidden: Forbidden,
        _cluster.WriteError_Conflict: Conflict,
        _cluster.WriteError_NotFound: NotFound,
        _cluster.WriteError_Invalid: Invalid,
        _cluster.WriteError_Throttled: Throttled,
        _cluster.WriteError_Unavailable: Unavailable,
        _cluster.WriteError_TooLarge: TooLarge,
    }


class ObjectRef:
    """An object to write, or its ``status`` or ``scale`` subresource:
    ``ObjectRef(Gvk("apps", "v1", "Deployment"), "shop", "web")``; the
    namespace is ``None`` for a cluster-scoped object."""

    __slots__ = ("gvk", "namespace", "name", "subresource")

    def __init__(self, gvk, namespace, name, subresource=None):
        self.gvk = gvk
        self.namespace = namespace
        self.name = name
        self.subresource = subresource

    @classmethod
    def from_key(cls, gvk, key, subresource=None):
        """The object with this cache key (``namespace/name``, or ``name``), as
        in :attr:`kinformer.Delta.key` and :attr:`kinformer.Request.key`."""
        namespace, _, name = key.rpartition("/")
        return cls(gvk, namespace or None, name, subresource)

    @property
    def key(self):
        """``namespace/name``, or ``name``."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __repr__(self):
        sub = f", subresource={self.subresource!r}" if self.subresource else ""
        return f"ObjectRef({self.gvk!r}, {self.namespace!r}, {self.name!r}{sub})"

    def _wit(self):
        return _cluster.ObjectRef(self.gvk._wit(), self.namespace, self.name, self.subresource)


def _text(value):
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _imports():
    """The host's ``cluster`` interface, if the plugin was built with it."""
    if _cluster is None:
        raise Denied("this plugin was built for the plugin world, which cannot write: build it with --world writer")
    return _cluster


def _write(call, *args):
    try:
        return call(*args)
    except Err as err:
        raise _WRITE_ERRORS[type(err.value)](err.value.value) from None


def create(gvk, namespace, obj):
    """Creates ``obj`` (with ``metadata.name`` or ``metadata.generateName``)
    in ``namespace`` (``None`` for a cluster-scoped type); returns it as
    stored. Needs ``create``. An object that exists already is a :class:`Conflict`."""
    return json.loads(_write(_imports().create, gvk._wit(), namespace, _text(obj)))


def update(target, obj):
    """Replaces an object or its subresource with ``obj``; when ``obj``
    carries ``metadata.resourceVersion``, it must still be the server's (else
    :class:`Conflict`). Returns it as stored. Needs ``update``."""
    return json.loads(_write(_imports().update, target._wit(), _text(obj)))


def patch(target, patch):
    """Patches an object or its subresource: a dict is a JSON merge patch
    (RFC 7386, ``{"spec": {"replicas": 3}}``), a list a JSON patch (RFC 6902,
    ``[{"op": "replace", "path": "/spec/replicas", "value": 3}]``). Returns the
    object as stored. Needs ``patch``."""
    imports = _imports()
    patch_type = imports.PatchType.JSON if isinstance(patch, list) else imports.PatchType.MERGE
    return json.loads(_write(imports.patch, target._wit(), patch_type, _text(patch)))


def apply(target, obj, force=False):
    """Server-side apply of ``obj`` with the plugin's name as field manager:
    the plugin owns the fields it sets; ``force`` takes over fields other
    managers own (else those are a :class:`Conflict`). Returns the object as
    stored. Needs ``apply``."""
    return json.loads(_write(_imports().apply, target._wit(), _text(obj), force))


def delete(target, uid=None, resource_version=None, propagation=None):
    """Deletes an object, only while it has ``uid`` and is at
    ``resource_version`` when given (else :class:`Conflict`);
    ``propagation`` is ``Orphan``, ``Background`` or ``Foreground`` (the
    server's default when ``None``). Needs ``delete``."""
    imports = _imports()
    if propagation is not None:
        if propagation not in ("Orphan", "Background", "Foreground"):
            raise Invalid(f"propagation {propagation!r}: want Orphan, Background or Foreground")
        propagation = imports.Propagation[propagation.upper()]
    _write(imports.delete, target._wit(), imports.DeleteOptions(uid, resource_version, propagation))


def record_event(regarding, type, reason, action, note=""):
    """Records an ``events.k8s.io/v1`` Event about ``regarding``, reported as
    ``kinformer/<plugin>``: ``type`` ``Normal`` or ``Warning``, ``reason`` in
    UpperCamelCase (``ScaledUp``), ``action`` what was done (``Scale``),
    ``note`` for humans (at most 1 KiB). The same event again within ten
    minutes counts in the first one's series; more than 25 events about one
    object, then more than one per five minutes, are :class:`Throttled`.
    Needs ``create`` on ``events.k8s.io/v1/Event`` in the object's namespace."""
    imports = _imports()
    if type not in ("Normal", "Warning"):
        raise Invalid(f"event type {type!r}: want Normal or Warning")
    _write(imports.record_event, regarding._wit(), imports.EventType[type.upper()], reason, action, note)
