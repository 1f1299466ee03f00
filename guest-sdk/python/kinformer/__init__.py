"""Write kinformer plugins in Python: Kubernetes event handlers and
controllers that run as WebAssembly components.

A plugin is a subclass of :class:`Handler`, exported as the component's world
with :func:`plugin`, and built with ``componentize-py`` against the ``plugin``
world of kinformer's ``wit/0.2.0/`` (or ``writer``, to write to the cluster)::

    import kinformer
    from kinformer import Gvk, Registration

    class PodLogger(kinformer.Handler):
        def init(self, config):
            return Registration("pod-logger", "0.1.0").watch(Gvk("", "v1", "Pod"))

        def handle(self, delta):
            kinformer.info(f"{delta.type} {delta.key} on {delta.value['spec'].get('nodeName')}")

    WitWorld = kinformer.plugin(PodLogger)

The host calls ``init`` once with the config string of the plugin's manifest,
then ``handle`` with every delta of the resources the plugin subscribed to.
While handling, a plugin reads the host's indexed cache through :mod:`cache
<kinformer>` functions (:func:`get`, :func:`list_objects`, :func:`by_index`,
:func:`index_values`) and logs with :func:`info` and friends.

A controller is a subclass of :class:`Controller`, exported with
:func:`controller` and built against the ``controller`` world: ``init``
returns a :class:`ControllerRegistration` (the primary resource, the
resources it owns and the ones mapped to its keys), and the host calls
``reconcile`` with a :class:`Request` for each key its workqueue hands out::

    DEPLOYMENTS = Gvk("apps", "v1", "Deployment")

    class Labeller(kinformer.Controller):
        def init(self, config):
            return ControllerRegistration("labeller", "0.1.0", DEPLOYMENTS)

        def reconcile(self, request):
            deployment = kinformer.get(DEPLOYMENTS, request.key)
            if deployment and "team" not in deployment["metadata"].get("labels", {}):
                cluster.patch(ObjectRef.from_key(DEPLOYMENTS, request.key), {"metadata": {"labels": {"team": "none"}}})
            return Action.requeue_after(600)

    WitWorld = kinformer.controller(Labeller)

Writers and controllers write through :mod:`kinformer.cluster`, as far as
the operator's grant allows.

Errors: raise :class:`PluginError` (or let a :class:`CacheError` or a
:class:`kinformer.cluster.WriteError` through) to return an error to the
host: from ``handle``, the host delivers the batch again later or skips it,
as the operator configured; from ``reconcile``, it retries the key with
backoff and reconciles the others meanwhile. From ``handle`` any other
exception is a bug: it traps the instance, its traceback lands in the
plugin's log, and the host restarts it. From ``reconcile`` every exception
is an error (other than a :class:`PluginError`, with its type and line), as
in any controller: one object's surprise does not stop the others'.
"""

import json
import traceback

from componentize_py_types import Err
import wit_world as _world
from wit_world.imports import cache as _cache
from wit_world.imports import log as _log
from wit_world.imports import types as _types

try:
    from wit_world.imports import deltas as _deltas
except ImportError:  # built for the `controller` world, which takes no deltas
    _deltas = None

__all__ = [
    "Handler", "Delta", "Gvk", "Registration", "ObjectList", "PluginError", "CacheError",
    "Denied", "InvalidArgument", "NotCached", "UnknownIndex", "get", "list_objects",
    "by_index", "index_values", "trace", "debug", "info", "warn", "error", "plugin",
    "Controller", "ControllerRegistration", "Request", "Action", "controller", "cluster",
]


class Gvk:
    """A Kubernetes resource type: ``Gvk("apps", "v1", "Deployment")``; the
    core group is ``""``."""

    __slots__ = ("group", "version", "kind")

    def __init__(self, group, version, kind):
        self.group = group
        self.version = version
        self.kind = kind

    @classmethod
    def parse(cls, resource):
        """``v1/Pod`` or ``apps/v1/Deployment`` (apiVersion/Kind)."""
        parts = resource.strip().split("/")
        if len(parts) == 2 and all(parts):
            return cls("", parts[0], parts[1])
        if len(parts) == 3 and all(parts):
            return cls(*parts)
        raise PluginError(
            f"bad resource {resource!r}: want apiVersion/Kind, e.g. v1/Pod or apps/v1/Deployment"
        )

    @property
    def api_version(self):
        """``v1`` or ``apps/v1``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __eq__(self, other):
        return isinstance(other, Gvk) and self._tuple() == other._tuple()

    def __hash__(self):
        return hash(self._tuple())

    def __repr__(self):
        return f"Gvk({self.group!r}, {self.version!r}, {self.kind!r})"

    def _tuple(self):
        return (self.group, self.version, self.kind)

    def _wit(self):
        return _types.GroupVersionKind(self.group, self.version, self.kind)


class Registration:
    """What a plugin watches, caches and indexes, returned from
    :meth:`Handler.init`. The setters return the registration, to chain."""

    def __init__(self, name, version):
        self.name = name
        self.version = version
        self._subscriptions = []
        self._indexes = []

    def watch(self, gvk, namespace=None, label_selector=None):
        """Deliver the deltas of ``gvk`` (optionally of one namespace, or
        matching a label selector) to ``handle``, and cache it."""
        self._subscriptions.append(_types.Subscription(gvk._wit(), namespace, label_selector, True))
        return self

    def cache(self, gvk, namespace=None, label_selector=None):
        """Keep ``gvk`` cached for queries without delivering its deltas."""
        self._subscriptions.append(_types.Subscription(gvk._wit(), namespace, label_selector, False))
        return self

    def index(self, gvk, name, field_path):
        """Index ``gvk``'s cache by the value at ``field_path`` (dotted, e.g.
        ``spec.nodeName``), queried with :func:`by_index` as ``name``."""
        self._indexes.append(_types.IndexSpec(gvk._wit(), name, field_path))
        return self

    def _wit(self):
        return _types.Registration(self.name, self.version, self._subscriptions, self._indexes)


_DELTA_TYPES = {
    _types.DeltaType.ADDED: "Added",
    _types.DeltaType.UPDATED: "Updated",
    _types.DeltaType.DELETED: "Deleted",
    _types.DeltaType.REPLACED: "Replaced",
    _types.DeltaType.SYNC: "Sync",
}


# The number of the batch handled last, counted from 1. The host answers
# for the old objects of that batch alone.
_batch = 0

# What a delta's old object is until asked for: ``None`` is an answer.
_UNREAD = object()


class _Batch:
    """What the deltas of one batch share: its number, its resource type and
    the bytes of their texts, end to end."""

    __slots__ = ("number", "gvk", "text")

    def __init__(self, number, gvk, text):
        self.number = number
        self.gvk = gvk
        self.text = text


def _deltas_of(batch):
    """The deltas of a batch as the host lays it out: their texts end to end,
    their old objects left on the host until asked for."""
    global _batch
    _batch += 1
    shared = _Batch(_batch, batch.gvk, batch.text)
    deltas = []
    at = 0
    for index, entry in enumerate(batch.deltas):
        deltas.append(Delta(shared, index, entry, at))
        at += entry.key_len + entry.resource_version_len + entry.object_len
    return deltas


class Delta:
    """One change to one object. Its texts are read from the batch's bytes on
    first use, its JSON parsed on first use of :attr:`value` (or
    :attr:`old_value`), and only then."""

    __slots__ = (
        "_batch", "_index", "_entry", "_at", "_gvk", "_key", "_resource_version", "_json",
        "_old_json", "_value", "_old_value",
    )

    def __init__(self, batch, index, entry, at):
        self._batch = batch
        self._index = index
        self._entry = entry
        # Where the delta's texts start in the batch's bytes: its key, then
        # its resourceVersion, then its object.
        self._at = at
        self._gvk = None
        self._key = None
        self._resource_version = None
        self._json = None
        self._old_json = _UNREAD
        self._value = None
        self._old_value = None

    def _text(self, start, length):
        start += self._at
        return self._batch.text[start : start + length].decode()

    @property
    def type(self):
        """``Added``, ``Updated``, ``Deleted``, ``Replaced`` or ``Sync``, as
        client-go names them."""
        return _DELTA_TYPES[self._entry.type]

    @property
    def gvk(self):
        """The object's resource type."""
        if self._gvk is None:
            gvk = self._batch.gvk
            self._gvk = Gvk(gvk.group, gvk.version, gvk.kind)
        return self._gvk

    @property
    def key(self):
        """``namespace/name``, or ``name`` for cluster-scoped objects."""
        if self._key is None:
            self._key = self._text(0, self._entry.key_len)
        return self._key

    @property
    def namespace(self):
        """The object's namespace; ``""`` for cluster-scoped objects."""
        namespace, _, name = self.key.rpartition("/")
        return namespace

    @property
    def name(self):
        """The object's name."""
        return self.key.rpartition("/")[2]

    @property
    def resource_version(self):
        """The object's ``metadata.resourceVersion`` in this state."""
        if self._resource_version is None:
            entry = self._entry
            self._resource_version = self._text(entry.key_len, entry.resource_version_len)
        return self._resource_version

    @property
    def is_initial_list(self):
        """True for the deltas of the initial list a fresh instance receives."""
        return self._entry.initial_list

    @property
    def json(self):
        """The object as JSON text: the new state, or the last known one for
        ``Deleted``."""
        if self._json is None:
            entry = self._entry
            self._json = self._text(entry.key_len + entry.resource_version_len, entry.object_len)
        return self._json

    @property
    def old_json(self):
        """The previous state as JSON text, for ``Updated`` only. The host
        sends it when first asked for: read it while handling the delta's
        batch. A delta kept past that answers ``None``, unless it was read
        before."""
        if self._old_json is _UNREAD:
            current = self._batch.number == _batch
            self._old_json = _deltas.old_object(self._index) if self._entry.has_old_object and current else None
        return self._old_json

    @property
    def value(self):
        """The object, parsed (once) into dicts and lists."""
        if self._value is None:
            self._value = json.loads(self.json)
        return self._value

    @property
    def old_value(self):
        """The previous state, parsed, for ``Updated``; else ``None``."""
        if self._old_value is None and self.old_json is not None:
            self._old_value = json.loads(self.old_json)
        return self._old_value

    def __repr__(self):
        return f"Delta({self.type} {self.gvk.kind} {self.key} rv={self.resource_version})"


class PluginError(Exception):
    """An error the plugin returns to the host: raised from ``init`` it refuses
    to start; from ``handle`` the host retries the batch (or skips it)."""


class CacheError(PluginError):
    """Why a cache query was not answered; one of the subclasses below."""


class Denied(CacheError):
    """The plugin's grant does not cover this resource or namespace."""


class InvalidArgument(CacheError):
    """A malformed argument: an empty or overlong key, a bad selector."""


class NotCached(CacheError):
    """Nothing subscribes to this resource: register it with ``watch`` or ``cache``."""


class UnknownIndex(CacheError):
    """The index does not exist on this resource's cache."""


_CACHE_ERRORS = {
    _cache.CacheError_Denied: Denied,
    _cache.CacheError_InvalidArgument: InvalidArgument,
    _cache.CacheError_NotCached: NotCached,
    _cache.CacheError_UnknownIndex: UnknownIndex,
}


def _query(call, *args):
    try:
        return call(*args)
    except Err as err:
        raise _CACHE_ERRORS[type(err.value)](err.value.value) from None


class ObjectList:
    """Objects a cache query answered, ordered by key, each parsed into dicts
    when first read; :attr:`truncated` says whether more matched."""

    __slots__ = ("json", "truncated", "_parsed")

    def __init__(self, answer):
        self.json = answer.objects
        self.truncated = answer.truncated
        self._parsed = [None] * len(answer.objects)

    def __len__(self):
        return len(self.json)

    def __getitem__(self, i):
        if self._parsed[i] is None:
            self._parsed[i] = json.loads(self.json[i])
        return self._parsed[i]

    def __iter__(self):
        return (self[i] for i in range(len(self.json)))


def get(gvk, key):
    """The cached object with this key (``namespace/name``), parsed, or
    ``None``. May be slightly stale: answers come from the host's cache."""
    found = _query(_cache.get, gvk._wit(), key)
    return None if found is None else json.loads(found)


def list_objects(gvk, namespace=None, label_selector=None, limit=0):
    """The cached objects of ``gvk`` in ``namespace`` (all when ``None``)
    matching ``label_selector``; at most ``limit`` (0: the host's limit)."""
    return ObjectList(_query(_cache.list_objects, gvk._wit(), _cache.ListQuery(namespace, label_selector, limit)))


def by_index(gvk, index, value, limit=0):
    """The cached objects whose index ``index`` holds ``value``; the built-in
    indexes are ``namespace``, ``owner`` (owner uid) and ``label:KEY``."""
    return ObjectList(_query(_cache.by_index, gvk._wit(), index, value, limit))


def index_values(gvk, index):
    """The values index ``index`` holds, sorted."""
    return _query(_cache.index_values, gvk._wit(), index)


def trace(message):
    """Logs at TRACE, tagged with the plugin's name."""
    _log.log(_log.Level.TRACE, str(message))


def debug(message):
    """Logs at DEBUG."""
    _log.log(_log.Level.DEBUG, str(message))


def info(message):
    """Logs at INFO."""
    _log.log(_log.Level.INFO, str(message))


def warn(message):
    """Logs at WARN."""
    _log.log(_log.Level.WARN, str(message))


def error(message):
    """Logs at ERROR."""
    _log.log(_log.Level.ERROR, str(message))


class Handler:
    """What a plugin implements. The host creates one instance, calls
    :meth:`init` once, then :meth:`handle` for every delta; state kept on the
    instance lives until the instance traps or is reloaded, after which a
    fresh one receives the cache again as deltas flagged initial list."""

    def init(self, config):
        """Returns the :class:`Registration` for this ``config`` (the
        manifest's string, ``""`` without one)."""
        raise NotImplementedError

    def handle(self, delta):
        """Handles one :class:`Delta`. Raising :class:`PluginError` asks the
        host to deliver the whole batch again, so be idempotent."""
        raise NotImplementedError

    def handle_batch(self, deltas):
        """Handles a batch in order; by default :meth:`handle` for each."""
        for delta in deltas:
            self.handle(delta)


def _check_world(export, builds):
    """Fails the build (which runs the app once) when the component's world
    has no ``export``."""
    if not hasattr(_world.WitWorld, export):
        raise PluginError(f"the component's world has no {export}: build this app with {builds}")


def _err(exception):
    """The host's error for an exception from ``init``, ``handle`` or
    ``reconcile``; other than a :class:`PluginError`, with its type and line."""
    message = str(exception)
    if not isinstance(exception, PluginError):
        where = traceback.extract_tb(exception.__traceback__)[-1:]
        at = f" (at {where[0].filename.rpartition('/')[2]}:{where[0].lineno})" if where else ""
        message = f"{type(exception).__name__}: {message}{at}"
    return Err(_types.Error(message or type(exception).__name__))


def _started(user_class, state, config):
    """Runs ``init`` of a fresh instance of ``user_class``, keeps the instance
    in ``state`` and returns the registration for the host."""
    instance = user_class()
    try:
        registration = instance.init(config)
    except PluginError as exception:
        raise _err(exception) from None
    state["instance"] = instance
    return registration._wit()


def _running(state, call):
    """The instance ``init`` started; an error for the host before that."""
    instance = state.get("instance")
    if instance is None:
        raise Err(_types.Error(f"{call} called before a successful init"))
    return instance


def plugin(handler_class):
    """The component's world for a :class:`Handler` subclass: assign it to
    ``WitWorld`` in the app module that ``componentize-py`` builds."""
    _check_world("handle", "--world plugin (or writer)")
    state = {}

    class WitWorld:
        def init(self, config):
            return _started(handler_class, state, config)

        def handle(self, batch):
            handler = _running(state, "handle")
            try:
                handler.handle_batch(_deltas_of(batch))
            except PluginError as exception:
                raise _err(exception) from None

    return WitWorld


class ControllerRegistration:
    """What a controller reconciles and reads, returned from
    :meth:`Controller.init`: its primary resource (each object a key), the
    resources it owns and the ones mapped to its keys, and what else it
    caches and indexes. The setters return the registration, to chain."""

    def __init__(self, name, version, primary):
        self._base = Registration(name, version)
        self.primary = primary
        self._owns = []
        self._maps = []
        self._resync_seconds = 0

    def owns(self, gvk):
        """A change to an object of ``gvk`` whose controller owner (an
        ``ownerReference`` with ``controller: true``) is a primary object
        enqueues that owner."""
        self._owns.append(gvk)
        return self

    def maps(self, gvk, index, field_path):
        """A change to an object of ``gvk`` enqueues the primary objects of
        its namespace whose index ``index`` (declared with :meth:`index`, or
        built in) holds a value found at ``field_path`` in the object."""
        self._maps.append(_types.KeyMapping(gvk._wit(), index, field_path))
        return self

    def cache(self, gvk, namespace=None, label_selector=None):
        """Also keeps ``gvk`` cached for queries (its changes enqueue nothing)."""
        self._base.cache(gvk, namespace, label_selector)
        return self

    def index(self, gvk, name, field_path):
        """Indexes ``gvk``'s cache by the values at ``field_path``, as ``name``."""
        self._base.index(gvk, name, field_path)
        return self

    def resync(self, seconds):
        """Enqueues every primary key each ``seconds`` (0: never)."""
        self._resync_seconds = int(seconds)
        return self

    def _wit(self):
        return _types.ControllerRegistration(
            self._base._wit(),
            self.primary._wit(),
            [gvk._wit() for gvk in self._owns],
            list(self._maps),
            self._resync_seconds,
        )


class Request:
    """A key to reconcile: one primary object, which may no longer exist."""

    __slots__ = ("key", "namespace", "name")

    def __init__(self, request):
        self.key = request.key
        #: ``None`` for a cluster-scoped object.
        self.namespace = request.namespace
        self.name = request.name

    def __repr__(self):
        return f"Request({self.key!r})"


class Action:
    """What the host does after a successful reconcile: :meth:`done` (also
    what returning ``None`` means) or :meth:`requeue_after`."""

    __slots__ = ("requeue_after_ms",)

    def __init__(self, requeue_after_ms=None):
        self.requeue_after_ms = requeue_after_ms

    @classmethod
    def done(cls):
        """Nothing more: reconcile the key again on its next change (or resync)."""
        return cls()

    @classmethod
    def requeue_after(cls, seconds):
        """Reconcile the key again after ``seconds``, even if nothing changes."""
        return cls(max(0, round(seconds * 1000)))

    def __repr__(self):
        return f"Action(requeue_after_ms={self.requeue_after_ms})"


class Controller:
    """What a controller implements. The host creates one instance, calls
    :meth:`init` once, then :meth:`reconcile` for each key its workqueue
    hands out: once however often the key was queued, never twice at the
    same time, again with backoff after an error. After a restart or a
    reload, ``init`` runs again and every primary key is reconciled once."""

    def init(self, config):
        """Returns the :class:`ControllerRegistration` for this ``config``
        (the manifest's string, ``""`` without one)."""
        raise NotImplementedError

    def reconcile(self, request):
        """Reconciles one :class:`Request`: read the primary object (it may
        be gone) and what else is needed from the cache, write what the
        cluster should become, and return an :class:`Action` (or ``None``).
        Raising retries the key with backoff."""
        raise NotImplementedError


def controller(controller_class):
    """The component's world for a :class:`Controller` subclass: assign it to
    ``WitWorld`` in the app module, built with ``--world controller``."""
    _check_world("reconcile", "--world controller")
    state = {}

    class WitWorld:
        def init(self, config):
            return _started(controller_class, state, config)

        def reconcile(self, request):
            instance = _running(state, "reconcile")
            try:
                action = instance.reconcile(Request(request))
            except Exception as exception:
                raise _err(exception) from None
            return _types.Action((action or Action.done()).requeue_after_ms)

    return WitWorld


from . import cluster  # noqa: E402 (it builds on the classes above)
