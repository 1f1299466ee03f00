// js-fetch: a plugin built with the JavaScript SDK, for the tests. It watches
// pods and, on its first batch, GETs the URL of its config with `fetch()`,
// logging `fetch STATUS BYTES`, or `fetch error NAME: MESSAGE` when the
// request got no response. `fetch()` rejects such a request with a
// `TypeError` whatever the host's reason (`denied`, `timeout`, ...): the
// host's status of the plugin tells them apart. At `init` it logs
// `env GREETING=VALUE` from `process.env` (the manifest's `[env]`).
// Build: `guest-sdk/js/build test-plugins/js-fetch OUT.wasm`.

import { Gvk, Handler, Registration, info, plugin } from "./kinformer.js";

class Fetcher extends Handler {
  init(config) {
    this.url = config;
    this.fetched = false;
    info(`env GREETING=${process.env.GREETING}`);
    return new Registration("js-fetch", "0.1.0").watch(new Gvk("", "v1", "Pod"));
  }

  // `fetch()` answers with a promise: an async `handle` is awaited, the
  // batch's call ending when it settles.
  async handle(delta) {
    if (this.fetched) return;
    this.fetched = true;
    try {
      const response = await fetch(this.url);
      const body = await response.arrayBuffer();
      info(`fetch ${response.status} ${body.byteLength}`);
    } catch (failure) {
      info(`fetch error ${failure.name}: ${failure.message}`);
    }
  }
}

const world = plugin(Fetcher);
export const init = world.init;
export const handle = world.handle;
