// js-writer: a plugin of the writer world built with the JavaScript SDK, for
// the tests. On each ConfigMap delta it stamps the ConfigMap with the
// resourceVersion it saw (a JSON patch), logs the resourceVersion the write
// was answered with, and tries a delete in `kube-system`, logging the refusal.
// Build: `guest-sdk/js/build --world writer test-plugins/js-writer OUT.wasm`.

import { Gvk, Handler, ObjectRef, Registration, WriteError, cluster, info, plugin, warn } from "./kinformer.js";

const CONFIG_MAPS = new Gvk("", "v1", "ConfigMap");

class Stamper extends Handler {
  init(config) {
    return new Registration("js-writer", "0.1.0").watch(CONFIG_MAPS);
  }

  handle(delta) {
    const seen = [{ op: "add", path: "/metadata/annotations", value: { seen: delta.resourceVersion } }];
    const stored = cluster.patch(ObjectRef.fromKey(CONFIG_MAPS, delta.key), seen);
    info(`stamped ${delta.key}, stored at rv ${stored.metadata.resourceVersion}`);
    try {
      cluster.delete(new ObjectRef(CONFIG_MAPS, "kube-system", "settings"));
    } catch (refused) {
      if (!(refused instanceof WriteError)) throw refused;
      warn(`refused (${refused.kind}): ${refused.message}`);
    }
  }
}

const world = plugin(Stamper);
export const init = world.init;
export const handle = world.handle;
