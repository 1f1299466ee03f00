// {{name}}: a kinformer plugin that logs every delta it receives.
//
// Its config (in {{name}}.toml) is a comma-separated list of resources to
// watch, as apiVersion/Kind: `v1/Pod,apps/v1/Deployment`.

import { Gvk, Handler, Registration, info, plugin } from "./kinformer.js";

class Plugin extends Handler {
  init(config) {
    const registration = new Registration("{{name}}", "0.1.0");
    for (const resource of config.split(",").map((r) => r.trim()).filter((r) => r)) {
      registration.watch(Gvk.parse(resource));
    }
    return registration;
  }

  handle(delta) {
    // Every start, swap or settings change hands the plugin the whole cache
    // again as Added, flagged initial list: rebuild state from it, but act
    // on the outside world only for what changes after it.
    const initial = delta.isInitialList ? " (initial list)" : "";
    info(`${delta.type} ${delta.gvk.kind} ${delta.key} rv=${delta.resourceVersion}${initial}`);
  }
}

const world = plugin(Plugin);
export const init = world.init;
export const handle = world.handle;
