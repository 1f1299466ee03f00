//! The host side of the `cluster` interface: a plugin's writes to the cluster.
//!
//! Every write is checked against the plugin's write grant before anything is
//! sent. The default grant allows no writes, so each call answers `denied`.

use super::bindings::kinformer::plugin::cluster::{self, DeleteOptions, EventType, ObjectRef, PatchType, WriteError};
use super::bindings::kinformer::plugin::types::GroupVersionKind;
use super::host::HostState;

fn denied<T>(verb: &str, gvk: &GroupVersionKind) -> Result<T, WriteError> {
    let api_version = if gvk.group.is_empty() {
        gvk.version.clone()
    } else {
        format!("{}/{}", gvk.group, gvk.version)
    };
    Err(WriteError::Denied(format!(
        "{verb} {api_version} {} is not granted to this plugin",
        gvk.kind
    )))
}

impl cluster::Host for HostState {
    fn create(
        &mut self,
        gvk: GroupVersionKind,
        _namespace: Option<String>,
        _object: String,
    ) -> Result<String, WriteError> {
        denied("create", &gvk)
    }

    fn update(&mut self, target: ObjectRef, _object: String) -> Result<String, WriteError> {
        denied("update", &target.gvk)
    }

    fn patch(&mut self, target: ObjectRef, _patch_type: PatchType, _patch: String) -> Result<String, WriteError> {
        denied("patch", &target.gvk)
    }

    fn apply(&mut self, target: ObjectRef, _object: String, _force: bool) -> Result<String, WriteError> {
        denied("apply", &target.gvk)
    }

    fn delete(&mut self, target: ObjectRef, _options: DeleteOptions) -> Result<(), WriteError> {
        denied("delete", &target.gvk)
    }

    fn record_event(
        &mut self,
        _regarding: ObjectRef,
        _type: EventType,
        _reason: String,
        _action: String,
        _note: String,
    ) -> Result<(), WriteError> {
        denied(
            "create",
            &GroupVersionKind {
                group: "events.k8s.io".into(),
                version: "v1".into(),
                kind: "Event".into(),
            },
        )
    }
}
