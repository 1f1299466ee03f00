// The benchmark's no-op plugin in JavaScript: what test-plugins/bench-probe is
// in Rust with config `noop`. It watches pods, declares the same index of pods
// by node, and does nothing with a delta but receive it through the SDK.
//
// Build: `guest-sdk/js/build bench/plugins/noop-js OUT.wasm`.

import { Gvk, Handler, PluginError, Registration, plugin } from "./kinformer.js";

const PODS = new Gvk("", "v1", "Pod");

class Noop extends Handler {
  init(config) {
    if (config !== "" && config !== "noop") {
      throw new PluginError(`unknown mode ${JSON.stringify(config)}: this plugin only does noop`);
    }
    return new Registration("bench-noop", "0.1.0").watch(PODS).index(PODS, "node", "spec.nodeName");
  }

  handle(_delta) {}
}

const world = plugin(Noop);
export const init = world.init;
export const handle = world.handle;
