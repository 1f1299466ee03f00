// js-controller: a controller built with the JavaScript SDK, for the tests.
// It annotates each ConfigMap with the number of its data keys
// (`kinformer.dev/keys`) and asks to be requeued in a minute.
// Build: `guest-sdk/js/build --world controller test-plugins/js-controller OUT.wasm`.

import { Action, Controller, ControllerRegistration, Gvk, ObjectRef, cluster, controller, get, info } from "./kinformer.js";

const CONFIG_MAPS = new Gvk("", "v1", "ConfigMap");
const KEYS = "kinformer.dev/keys";

class KeyCounter extends Controller {
  init(config) {
    return new ControllerRegistration("js-controller", "0.1.0", CONFIG_MAPS);
  }

  reconcile(request) {
    const configMap = get(CONFIG_MAPS, request.key);
    if (configMap === undefined) return Action.done();
    const keys = String(Object.keys(configMap.data ?? {}).length);
    if (configMap.metadata.annotations?.[KEYS] === keys) return Action.done();
    const target = ObjectRef.fromKey(CONFIG_MAPS, request.key);
    const stored = cluster.patch(target, { metadata: { annotations: { [KEYS]: keys } } });
    info(`reconciled ${request.namespace}/${request.name}: ${keys} keys, stored at rv ${stored.metadata.resourceVersion}`);
    return Action.requeueAfter(60_000);
  }
}

const world = controller(KeyCounter);
export const init = world.init;
export const reconcile = world.reconcile;
