//! CustomResourceDefinitions: a created CRD is established and serves its resource types; a deleted one stops.

use serde_json::{Value, json};

use super::{Collection, ResourceId, State};
use crate::resources::{ResourceDef, ScalePaths};

/// Marks a new CRD `Established`, as the apiextensions controller does.
pub(super) fn establish(body: &mut Value) {
    body["status"] = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}
        ],
        "acceptedNames": body["spec"]["names"].clone(),
    });
}

/// The resource types a CRD serves: one per served version.
fn defs(crd: &Value) -> Vec<ResourceDef> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let (Some(group), Some(kind), Some(plural)) =
        (spec["group"].as_str(), names["kind"].as_str(), names["plural"].as_str())
    else {
        return Vec::new();
    };
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|version| version["served"].as_bool().unwrap_or(true))
        .filter_map(|version| {
            let mut def = ResourceDef::new(group, version["name"].as_str()?, kind, plural).with_generation();
            def.namespaced = spec["scope"].as_str() != Some("Cluster");
            def.status_subresource = version["subresources"].get("status").is_some();
            let scale = &version["subresources"]["scale"];
            if let (Some(spec), Some(status)) =
                (scale["specReplicasPath"].as_str(), scale["statusReplicasPath"].as_str())
            {
                def.scale_subresource = Some(ScalePaths {
                    spec_replicas: spec.to_owned(),
                    status_replicas: status.to_owned(),
                    label_selector: scale["labelSelectorPath"].as_str().map(str::to_owned),
                });
            }
            let schema = &version["schema"]["openAPIV3Schema"];
            def.schema = schema.is_object().then(|| schema.clone());
            def.printer_columns = version["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            def.custom = true;
            if let Some(singular) = names["singular"].as_str() {
                def.singular = singular.to_owned();
            }
            def.categories = names["categories"]
                .as_array()
                .map(|names| names.iter().filter_map(|n| Some(n.as_str()?.to_owned())).collect())
                .unwrap_or_default();
            def.short_names = names["shortNames"]
                .as_array()
                .map(|names| names.iter().filter_map(|n| Some(n.as_str()?.to_owned())).collect())
                .unwrap_or_default();
            Some(def)
        })
        .collect()
}

/// Starts serving the CRD's resource types.
pub(super) fn register(state: &mut State, crd: &Value) {
    let rv = state.resource_version;
    for def in defs(crd) {
        state
            .collections
            .entry(ResourceId::of(&def))
            .or_insert_with(|| Collection::new(def, rv));
    }
}

/// Stops serving the CRD's resource types; their objects go with them.
pub(super) fn unregister(state: &mut State, crd: &Value) {
    for def in defs(crd) {
        state.collections.remove(&ResourceId::of(&def));
    }
}
