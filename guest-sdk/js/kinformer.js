// Write kinformer plugins in JavaScript: Kubernetes event handlers and
// controllers that run as WebAssembly components, built with componentize-js
// against a world of kinformer's `wit/`: `plugin`, `writer` (a plugin that
// writes to the cluster) or `controller`.
//
//     import { Gvk, Handler, Registration, info, plugin } from "./kinformer.js";
//
//     class PodLogger extends Handler {
//       init(config) {
//         return new Registration("pod-logger", "0.1.0").watch(new Gvk("", "v1", "Pod"));
//       }
//       handle(delta) {
//         info(`${delta.type} ${delta.key} on ${delta.value.spec.nodeName}`);
//       }
//     }
//
//     const world = plugin(PodLogger);
//     export const init = world.init;
//     export const handle = world.handle;
//
// The host calls `init` once with the config string of the plugin's manifest,
// then `handle` with every delta of the resources the plugin subscribed to.
// While handling, a plugin reads the host's indexed cache (`get`,
// `listObjects`, `byIndex`, `indexValues`) and logs (`info` and friends).
// Whatever `init` or `handle` throws is returned to the host as the call's
// error: from `init` it refuses to start; from `handle` the host delivers the
// batch again later or skips it, as the operator configured.
//
// A controller extends `Controller` and is exported with `controller`: `init`
// returns a `ControllerRegistration` (the primary resource, what it owns and
// what maps to its keys), and the host calls `reconcile` with each key its
// workqueue hands out; what it throws retries the key with backoff.
//
//     class Labeller extends Controller {
//       init(config) {
//         return new ControllerRegistration("labeller", "0.1.0", DEPLOYMENTS);
//       }
//       reconcile(request) {
//         const deployment = get(DEPLOYMENTS, request.key);
//         if (deployment && !deployment.metadata.labels?.team) {
//           cluster.patch(ObjectRef.fromKey(DEPLOYMENTS, request.key), { metadata: { labels: { team: "none" } } });
//         }
//         return Action.requeueAfter(600_000);
//       }
//     }
//
//     const world = controller(Labeller);
//     export const init = world.init;
//     export const reconcile = world.reconcile;
//
// Writers and controllers write through `cluster`, as far as the operator's
// grant allows. The build writes `kinformer-world.js` beside this module: the
// world it builds for, and its `cluster` interface when the world has one.

import * as cache from "kinformer:plugin/cache@0.1.0";
import { log } from "kinformer:plugin/log@0.1.0";
import { cluster as clusterImports, getEnvironment, world as builtFor } from "./kinformer-world.js";

// `process.env`: the plugin's environment (the manifest's `[env]`), read when
// it is used, never at build time (the build runs the module once).
if (globalThis.process === undefined) globalThis.process = {};
if (globalThis.process.env === undefined) {
  Object.defineProperty(globalThis.process, "env", {
    get: () => Object.fromEntries(getEnvironment()),
  });
}

/** A Kubernetes resource type: `new Gvk("apps", "v1", "Deployment")`; the core group is `""`. */
export class Gvk {
  constructor(group, version, kind) {
    this.group = group;
    this.version = version;
    this.kind = kind;
  }

  /** `v1/Pod` or `apps/v1/Deployment` (apiVersion/Kind). */
  static parse(resource) {
    const parts = resource.trim().split("/");
    if (parts.every((part) => part !== "")) {
      if (parts.length === 2) return new Gvk("", parts[0], parts[1]);
      if (parts.length === 3) return new Gvk(parts[0], parts[1], parts[2]);
    }
    throw new PluginError(`bad resource ${JSON.stringify(resource)}: want apiVersion/Kind, e.g. v1/Pod or apps/v1/Deployment`);
  }

  /** `v1` or `apps/v1`. */
  get apiVersion() {
    return this.group ? `${this.group}/${this.version}` : this.version;
  }

  wit() {
    return { group: this.group, version: this.version, kind: this.kind };
  }
}

/** What a plugin watches, caches and indexes, returned from `init`; the setters chain. */
export class Registration {
  constructor(name, version) {
    this.name = name;
    this.version = version;
    this.subscriptions = [];
    this.indexes = [];
  }

  /** Deliver the deltas of `gvk` (optionally of one namespace or matching a label selector) and cache it. */
  watch(gvk, { namespace, labelSelector } = {}) {
    this.subscriptions.push({ gvk: gvk.wit(), namespace, labelSelector, deliver: true });
    return this;
  }

  /** Keep `gvk` cached for queries without delivering its deltas. */
  cache(gvk, { namespace, labelSelector } = {}) {
    this.subscriptions.push({ gvk: gvk.wit(), namespace, labelSelector, deliver: false });
    return this;
  }

  /** Index `gvk`'s cache by the value at `fieldPath` (dotted, e.g. `spec.nodeName`), queried as `name`. */
  index(gvk, name, fieldPath) {
    this.indexes.push({ gvk: gvk.wit(), name, fieldPath });
    return this;
  }

  wit() {
    const { name, version, subscriptions, indexes } = this;
    return { name, version, subscriptions, indexes };
  }
}

const DELTA_TYPES = { added: "Added", updated: "Updated", deleted: "Deleted", replaced: "Replaced", sync: "Sync" };

/** One change to one object. Its JSON is parsed on the first read of `value` (or `oldValue`), and only then. */
export class Delta {
  #delta;
  #value;
  #oldValue;

  constructor(delta) {
    this.#delta = delta;
  }

  /** `Added`, `Updated`, `Deleted`, `Replaced` or `Sync`, as client-go names them. */
  get type() {
    return DELTA_TYPES[this.#delta.type];
  }

  /** The object's resource type. */
  get gvk() {
    const { group, version, kind } = this.#delta.gvk;
    return new Gvk(group, version, kind);
  }

  /** `namespace/name`, or `name` for cluster-scoped objects. */
  get key() {
    return this.#delta.key;
  }

  /** The object's namespace; `""` for cluster-scoped objects. */
  get namespace() {
    const slash = this.#delta.key.lastIndexOf("/");
    return slash < 0 ? "" : this.#delta.key.slice(0, slash);
  }

  /** The object's name. */
  get name() {
    return this.#delta.key.slice(this.#delta.key.lastIndexOf("/") + 1);
  }

  /** The object's `metadata.resourceVersion` in this state. */
  get resourceVersion() {
    return this.#delta.resourceVersion;
  }

  /** True for the deltas of the initial list a fresh instance receives. */
  get isInitialList() {
    return this.#delta.initialList;
  }

  /** The object as JSON text: the new state, or the last known one for `Deleted`. */
  get json() {
    return this.#delta.object;
  }

  /** The previous state as JSON text, for `Updated` only. */
  get oldJson() {
    return this.#delta.oldObject;
  }

  /** The object, parsed once. */
  get value() {
    this.#value ??= JSON.parse(this.#delta.object);
    return this.#value;
  }

  /** The previous state, parsed, for `Updated`; else `undefined`. */
  get oldValue() {
    if (this.#oldValue === undefined && this.#delta.oldObject != null) {
      this.#oldValue = JSON.parse(this.#delta.oldObject);
    }
    return this.#oldValue;
  }
}

/** An error a plugin returns to the host. */
export class PluginError extends Error {}

/**
 * Why a cache query was not answered: `kind` is `denied` (outside the grant),
 * `invalid-argument`, `not-cached` (nothing subscribes to the resource) or
 * `unknown-index`.
 */
export class CacheError extends PluginError {
  constructor(kind, message) {
    super(`${kind}: ${message}`);
    this.kind = kind;
  }
}

function query(call) {
  try {
    return call();
  } catch (error) {
    const payload = error?.payload;
    if (payload?.tag !== undefined) throw new CacheError(payload.tag, payload.val);
    throw error;
  }
}

/** Objects a cache query answered, ordered by key, each parsed when first read; `truncated` says whether more matched. */
export class ObjectList {
  #parsed;

  constructor(answer) {
    this.json = answer.objects;
    this.truncated = answer.truncated;
    this.#parsed = new Array(answer.objects.length);
  }

  get length() {
    return this.json.length;
  }

  at(i) {
    this.#parsed[i] ??= JSON.parse(this.json[i]);
    return this.#parsed[i];
  }

  *[Symbol.iterator]() {
    for (let i = 0; i < this.json.length; i++) yield this.at(i);
  }
}

/** The cached object with this key (`namespace/name`), parsed, or `undefined`. Answers may be slightly stale. */
export function get(gvk, key) {
  const found = query(() => cache.get(gvk.wit(), key));
  return found == null ? undefined : JSON.parse(found);
}

/** The cached objects of `gvk` in `namespace` (all when omitted) matching `labelSelector`; at most `limit` (0: the host's). */
export function listObjects(gvk, { namespace, labelSelector, limit = 0 } = {}) {
  return new ObjectList(query(() => cache.listObjects(gvk.wit(), { namespace, labelSelector, limit })));
}

/** The cached objects whose index `index` holds `value`; built in: `namespace`, `owner`, `label:KEY`. */
export function byIndex(gvk, index, value, limit = 0) {
  return new ObjectList(query(() => cache.byIndex(gvk.wit(), index, value, limit)));
}

/** The values index `index` holds, sorted. */
export function indexValues(gvk, index) {
  return query(() => cache.indexValues(gvk.wit(), index));
}

export const trace = (message) => log("trace", String(message));
export const debug = (message) => log("debug", String(message));
export const info = (message) => log("info", String(message));
export const warn = (message) => log("warn", String(message));
export const error = (message) => log("error", String(message));

/**
 * What a plugin implements. The host creates one instance, calls `init` once,
 * then `handle` for every delta; state kept on the instance lives until it
 * traps or is reloaded, after which a fresh one receives the cache again as
 * deltas flagged initial list.
 */
export class Handler {
  /** Returns the `Registration` for this config (the manifest's string, `""` without one). */
  init(config) {
    throw new PluginError("init is not implemented");
  }

  /**
   * Handles one `Delta`; throwing asks the host to deliver the whole batch
   * again, so be idempotent. It may be `async` (to `await fetch(...)`, say):
   * the batch's call then ends when its promise settles.
   */
  handle(delta) {
    throw new PluginError("handle is not implemented");
  }

  /** Handles a batch in order; by default `handle` for each, awaiting each promise `handle` returns. */
  handleBatch(deltas) {
    let pending;
    for (const delta of deltas) {
      if (pending !== undefined) {
        pending = pending.then(() => this.handle(delta));
        continue;
      }
      const result = this.handle(delta);
      if (result !== undefined && typeof result.then === "function") pending = result;
    }
    return pending;
  }
}

function asError(thrown) {
  if (thrown instanceof PluginError) return { message: thrown.message };
  if (thrown instanceof Error) return { message: `${thrown.name}: ${thrown.message}` };
  return { message: String(thrown) };
}

/** Fails the build (which runs the app once) when it builds for another world. */
function checkWorld(wanted, builds) {
  if (!wanted.includes(builtFor)) {
    throw new Error(`built for the ${builtFor} world: build this app with ${builds}`);
  }
}

/** `init` of a fresh `UserClass` instance: the instance and the registration for the host. */
function started(UserClass, config) {
  try {
    const fresh = new UserClass();
    return [fresh, fresh.init(config).wit()];
  } catch (thrown) {
    throw asError(thrown);
  }
}

/** The world's exports for a `Handler` subclass: export its `init` and `handle` from the app module. */
export function plugin(HandlerClass) {
  checkWorld(["plugin", "writer"], "--world plugin (or writer)");
  let handler;
  return {
    init(config) {
      let registration;
      [handler, registration] = started(HandlerClass, config);
      return registration;
    },
    handle(batch) {
      if (handler === undefined) throw { message: "handle called before a successful init" };
      let result;
      try {
        result = handler.handleBatch(batch.map((delta) => new Delta(delta)));
      } catch (thrown) {
        throw asError(thrown);
      }
      // An async handler: componentize-js runs the promise to completion.
      if (result !== undefined && typeof result.then === "function") {
        return result.then(
          () => undefined,
          (thrown) => {
            throw asError(thrown);
          },
        );
      }
    },
  };
}

/**
 * Why a write was not done: `kind` is `denied` (outside the grant: nothing
 * was sent), `forbidden` (the server's RBAC), `conflict` (a stale
 * resourceVersion or uid, an object that exists, fields another manager
 * owns), `not-found`, `invalid`, `throttled` (over the write rate),
 * `unavailable` or `too-large`.
 */
export class WriteError extends PluginError {
  constructor(kind, message) {
    super(`write ${kind}: ${message}`);
    this.kind = kind;
  }
}

/**
 * An object to write, or its `status` or `scale` subresource:
 * `new ObjectRef(new Gvk("apps", "v1", "Deployment"), "shop", "web")`; the
 * namespace is `undefined` for a cluster-scoped object.
 */
export class ObjectRef {
  constructor(gvk, namespace, name, subresource) {
    this.gvk = gvk;
    this.namespace = namespace;
    this.name = name;
    this.subresource = subresource;
  }

  /** The object with this cache key (`namespace/name`, or `name`), as in `Delta.key` and `Request.key`. */
  static fromKey(gvk, key, subresource) {
    const slash = key.lastIndexOf("/");
    return slash < 0
      ? new ObjectRef(gvk, undefined, key, subresource)
      : new ObjectRef(gvk, key.slice(0, slash), key.slice(slash + 1), subresource);
  }

  /** `namespace/name`, or `name`. */
  get key() {
    return this.namespace ? `${this.namespace}/${this.name}` : this.name;
  }

  wit() {
    return { gvk: this.gvk.wit(), namespace: this.namespace, name: this.name, subresource: this.subresource };
  }
}

/** The host's `cluster` interface, if the plugin was built with it. */
function writes() {
  if (clusterImports === undefined) {
    throw new WriteError("denied", "this plugin was built for the plugin world, which cannot write: build it with --world writer");
  }
  return clusterImports;
}

function write(call) {
  try {
    return call();
  } catch (error) {
    const payload = error?.payload;
    if (payload?.tag !== undefined) throw new WriteError(payload.tag, payload.val);
    throw error;
  }
}

const text = (value) => (typeof value === "string" ? value : JSON.stringify(value));

/**
 * Writes to the cluster, within the operator's write grant: each write is
 * checked against the plugin's grant, counted against its write rate,
 * audited, and sent with the plugin's name as field manager. Objects and
 * patches are plain objects (or JSON text); a missing `apiVersion`, `kind` or
 * `metadata.name` is filled in from the target. Each returns the object as
 * stored, parsed; a refused write throws a `WriteError`. Needs a plugin built
 * for the `writer` or `controller` world.
 */
export const cluster = {
  /** Creates `object` (with `metadata.name` or `generateName`) in `namespace` (`undefined` when cluster-scoped). Needs `create`. */
  create(gvk, namespace, object) {
    const imports = writes();
    return JSON.parse(write(() => imports.create(gvk.wit(), namespace, text(object))));
  },

  /** Replaces an object or its subresource; a `metadata.resourceVersion` in it must still be the server's. Needs `update`. */
  update(target, object) {
    const imports = writes();
    return JSON.parse(write(() => imports.update(target.wit(), text(object))));
  },

  /** Patches an object or its subresource: an array is a JSON patch (RFC 6902), an object a merge patch (RFC 7386). Needs `patch`. */
  patch(target, patch) {
    const imports = writes();
    const patchType = Array.isArray(patch) ? "json" : "merge";
    return JSON.parse(write(() => imports.patch(target.wit(), patchType, text(patch))));
  },

  /** Server-side apply with the plugin's name as field manager; `force` takes over fields other managers own. Needs `apply`. */
  apply(target, object, { force = false } = {}) {
    const imports = writes();
    return JSON.parse(write(() => imports.apply(target.wit(), text(object), force)));
  },

  /** Deletes an object, only while it has `uid` and is at `resourceVersion` when given; `propagation` is `Orphan`, `Background` or `Foreground`. Needs `delete`. */
  delete(target, { uid, resourceVersion, propagation } = {}) {
    const imports = writes();
    if (propagation !== undefined && !["Orphan", "Background", "Foreground"].includes(propagation)) {
      throw new WriteError("invalid", `propagation ${JSON.stringify(propagation)}: want Orphan, Background or Foreground`);
    }
    const options = { uid, resourceVersion, propagation: propagation?.toLowerCase() };
    write(() => imports.delete(target.wit(), options));
  },

  /**
   * Records an `events.k8s.io/v1` Event about `regarding`: `type` `Normal` or
   * `Warning`, `reason` in UpperCamelCase, `action` what was done, `note` for
   * humans. Repeats within ten minutes count in one Event's series; more than
   * 25 events about one object, then one per five minutes, are `throttled`.
   * Needs `create` on `events.k8s.io/v1/Event` in the object's namespace.
   */
  recordEvent(regarding, type, reason, action, note = "") {
    const imports = writes();
    if (type !== "Normal" && type !== "Warning") {
      throw new WriteError("invalid", `event type ${JSON.stringify(type)}: want Normal or Warning`);
    }
    write(() => imports.recordEvent(regarding.wit(), type.toLowerCase(), reason, action, note));
  },
};

/**
 * What a controller reconciles and reads, returned from `Controller.init`:
 * its primary resource (each object a key), the resources it owns and the
 * ones mapped to its keys, and what else it caches and indexes; the setters chain.
 */
export class ControllerRegistration {
  #base;

  constructor(name, version, primary) {
    this.#base = new Registration(name, version);
    this.primary = primary;
    this.owned = [];
    this.mappings = [];
    this.resyncSeconds = 0;
  }

  /** A change to an object of `gvk` whose controller owner is a primary object enqueues that owner. */
  owns(gvk) {
    this.owned.push(gvk);
    return this;
  }

  /** A change to an object of `gvk` enqueues the primary objects of its namespace whose index `index` holds a value at `fieldPath` in it. */
  maps(gvk, index, fieldPath) {
    this.mappings.push({ gvk: gvk.wit(), index, fieldPath });
    return this;
  }

  /** Also keeps `gvk` cached for queries (its changes enqueue nothing). */
  cache(gvk, options = {}) {
    this.#base.cache(gvk, options);
    return this;
  }

  /** Indexes `gvk`'s cache by the values at `fieldPath`, as `name`. */
  index(gvk, name, fieldPath) {
    this.#base.index(gvk, name, fieldPath);
    return this;
  }

  /** Enqueues every primary key each `seconds` (0: never). */
  resync(seconds) {
    this.resyncSeconds = Math.max(0, Math.floor(seconds));
    return this;
  }

  wit() {
    return {
      base: this.#base.wit(),
      primary: this.primary.wit(),
      owns: this.owned.map((gvk) => gvk.wit()),
      maps: this.mappings,
      resyncSeconds: this.resyncSeconds,
    };
  }
}

/** What the host does after a successful reconcile: `Action.done()` (also what returning nothing means) or `Action.requeueAfter(ms)`. */
export class Action {
  constructor(requeueAfterMs) {
    this.requeueAfterMs = requeueAfterMs;
  }

  /** Nothing more: reconcile the key again on its next change (or resync). */
  static done() {
    return new Action(undefined);
  }

  /** Reconcile the key again after `ms` milliseconds, even if nothing changes. */
  static requeueAfter(ms) {
    return new Action(Math.max(0, Math.round(ms)));
  }

  wit() {
    return { requeueAfterMs: this.requeueAfterMs === undefined ? undefined : BigInt(this.requeueAfterMs) };
  }
}

/**
 * What a controller implements. The host creates one instance, calls `init`
 * once, then `reconcile` with each key its workqueue hands out (a request
 * `{ key, namespace, name }`, the namespace `undefined` for a cluster-scoped
 * object): once however often it was queued, never twice at the same time,
 * again with backoff after a throw. After a restart or a reload, `init` runs
 * again and every primary key is reconciled once.
 */
export class Controller {
  /** Returns the `ControllerRegistration` for this config (the manifest's string, `""` without one). */
  init(config) {
    throw new PluginError("init is not implemented");
  }

  /** Reconciles one key: read the primary object (it may be gone), write what the cluster should become, return an `Action`. */
  reconcile(request) {
    throw new PluginError("reconcile is not implemented");
  }
}

/** The world's exports for a `Controller` subclass: export its `init` and `reconcile` from the app module. */
export function controller(ControllerClass) {
  checkWorld(["controller"], "--world controller");
  let instance;
  return {
    init(config) {
      let registration;
      [instance, registration] = started(ControllerClass, config);
      return registration;
    },
    reconcile(request) {
      if (instance === undefined) throw { message: "reconcile called before a successful init" };
      const { key, name } = request;
      const namespace = request.namespace ?? undefined;
      try {
        return (instance.reconcile(Object.freeze({ key, namespace, name })) ?? Action.done()).wit();
      } catch (thrown) {
        throw asError(thrown);
      }
    },
  };
}
