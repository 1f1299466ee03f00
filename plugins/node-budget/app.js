// node-budget: a kinformer plugin in JavaScript that warns when the pods on a
// node request more CPU than a budget.
//
// Pods are indexed by `spec.nodeName`; on every pod delta the plugin asks the
// host's cache for the pods on that node, sums their CPU requests, and logs
// when the node goes over its budget or back within it:
//
//     WARN node node-3: 7 pods request 1400m CPU, over the budget of 1000m
//     INFO node node-3: 4 pods request 800m CPU, within the budget of 1000m
//
// Config: `millicpu=N`, the budget per node (default 4000). Each delta is also
// logged at DEBUG as delta-logger logs it, an update with the resourceVersion
// of its previous state (`Updated Pod ns/name rv=12 (was rv=9)`).
// Build: `guest-sdk/js/build plugins/node-budget OUT.wasm`.

import { Gvk, Handler, PluginError, Registration, byIndex, debug, info, plugin, warn } from "./kinformer.js";

const PODS = new Gvk("", "v1", "Pod");

class NodeBudget extends Handler {
  init(config) {
    this.budget = 4000;
    for (const setting of config.split(",").map((s) => s.trim()).filter((s) => s)) {
      const [key, value] = setting.split("=");
      if (key !== "millicpu" || !/^[0-9]+$/.test(value ?? "")) {
        throw new PluginError(`bad setting ${JSON.stringify(setting)}: want millicpu=N`);
      }
      this.budget = Number(value);
    }
    // Nodes over their budget, as last reported.
    this.over = new Set();
    return new Registration("node-budget", "0.1.0").watch(PODS).index(PODS, "node", "spec.nodeName");
  }

  handle(delta) {
    const initial = delta.isInitialList ? " (initial list)" : "";
    // An update's previous state, fetched from the host only when read.
    const was = delta.oldValue?.metadata?.resourceVersion;
    const previous = was === undefined ? "" : ` (was rv=${was})`;
    debug(`${delta.type} ${delta.gvk.kind} ${delta.key} rv=${delta.resourceVersion}${previous}${initial}`);
    const node = delta.value.spec?.nodeName;
    if (!node) return;
    const pods = byIndex(PODS, "node", node);
    let requested = 0;
    for (const pod of pods) requested += cpuRequests(pod);
    const over = requested > this.budget;
    if (over === this.over.has(node)) return;
    if (over) {
      this.over.add(node);
      warn(`node ${node}: ${pods.length} pods request ${requested}m CPU, over the budget of ${this.budget}m`);
    } else {
      this.over.delete(node);
      info(`node ${node}: ${pods.length} pods request ${requested}m CPU, within the budget of ${this.budget}m`);
    }
  }
}

/** The pod's CPU requests in millicores. */
function cpuRequests(pod) {
  let total = 0;
  for (const container of pod.spec?.containers ?? []) {
    const cpu = container.resources?.requests?.cpu;
    if (cpu === undefined) continue;
    total += String(cpu).endsWith("m") ? Number.parseInt(cpu, 10) : Math.round(Number(cpu) * 1000);
  }
  return total;
}

const world = plugin(NodeBudget);
export const init = world.init;
export const handle = world.handle;
