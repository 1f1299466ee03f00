// {{name}}: a kinformer controller that reconciles every object of one
// resource, logging each.
//
// Its config (in {{name}}.toml) is the resource it reconciles, as
// apiVersion/Kind: `v1/Pod` or `apps/v1/Deployment`.

import { Action, Controller, ControllerRegistration, Gvk, controller, get, info } from "./kinformer.js";

class Reconciler extends Controller {
  init(config) {
    this.primary = Gvk.parse(config);
    return new ControllerRegistration("{{name}}", "0.1.0", this.primary);
  }

  reconcile(request) {
    const found = get(this.primary, request.key);
    info(found === undefined ? `reconcile ${request.key}: gone` : `reconcile ${request.key}: ${JSON.stringify(found).length} bytes`);
    return Action.done();
  }
}

const world = controller(Reconciler);
export const init = world.init;
export const reconcile = world.reconcile;
