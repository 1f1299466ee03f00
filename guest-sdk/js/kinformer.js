// Write kinformer plugins in JavaScript: Kubernetes event handlers that run
// as WebAssembly components, built with componentize-js against the `plugin`
// world of kinformer's `wit/`.
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

import * as cache from "kinformer:plugin/cache@0.1.0";
import { log } from "kinformer:plugin/log@0.1.0";

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

  /** Handles one `Delta`; throwing asks the host to deliver the whole batch again, so be idempotent. */
  handle(delta) {
    throw new PluginError("handle is not implemented");
  }

  /** Handles a batch in order; by default `handle` for each. */
  handleBatch(deltas) {
    for (const delta of deltas) this.handle(delta);
  }
}

function asError(thrown) {
  if (thrown instanceof PluginError) return { message: thrown.message };
  if (thrown instanceof Error) return { message: `${thrown.name}: ${thrown.message}` };
  return { message: String(thrown) };
}

/** The world's exports for a `Handler` subclass: export its `init` and `handle` from the app module. */
export function plugin(HandlerClass) {
  let handler;
  return {
    init(config) {
      try {
        const fresh = new HandlerClass();
        const registration = fresh.init(config);
        handler = fresh;
        return registration.wit();
      } catch (thrown) {
        throw asError(thrown);
      }
    },
    handle(batch) {
      if (handler === undefined) throw { message: "handle called before a successful init" };
      try {
        handler.handleBatch(batch.map((delta) => new Delta(delta)));
      } catch (thrown) {
        throw asError(thrown);
      }
    },
  };
}
