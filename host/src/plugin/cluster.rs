//! The host side of the `cluster` and `api` interfaces: a plugin's writes to
//! the cluster, and its uncached reads from the API server.
//!
//! Each call becomes a [`crate::apiserver::WriteRequest`] for the plugin's
//! [`Writer`](crate::apiserver::Writer), which validates it, checks the grant,
//! rate-limits, sends and audits it. Without a writer (the host has no cluster
//! connection, as in `kinformer check`), every call answers `denied`. The time
//! a call waits for the API server is given back to the plugin's deadline.

use super::bindings::kinformer::plugin::api::{self, ReadError};
use super::bindings::kinformer::plugin::cluster::{
    self, DeleteOptions, EventType, ObjectRef, PatchType, Propagation, WriteError,
};
use super::bindings::kinformer::plugin::types::GroupVersionKind;
use super::host::HostState;
use super::inputs::Answer;
use crate::apiserver as host;

fn from_wit_gvk(gvk: GroupVersionKind) -> kube::api::GroupVersionKind {
    kube::api::GroupVersionKind {
        group: gvk.group,
        version: gvk.version,
        kind: gvk.kind,
    }
}

fn from_wit_ref(target: ObjectRef) -> host::ObjectRef {
    host::ObjectRef {
        gvk: from_wit_gvk(target.gvk),
        namespace: target.namespace,
        name: target.name,
        subresource: target.subresource,
    }
}

fn to_wit_error(error: host::WriteError) -> WriteError {
    match error {
        host::WriteError::Denied(message) => WriteError::Denied(message),
        host::WriteError::Forbidden(message) => WriteError::Forbidden(message),
        host::WriteError::Conflict(message) => WriteError::Conflict(message),
        host::WriteError::NotFound(message) => WriteError::NotFound(message),
        host::WriteError::Invalid(message) => WriteError::Invalid(message),
        host::WriteError::Throttled(message) => WriteError::Throttled(message),
        host::WriteError::Unavailable(message) => WriteError::Unavailable(message),
        host::WriteError::TooLarge(message) => WriteError::TooLarge(message),
    }
}

fn no_writer() -> WriteError {
    WriteError::Denied("this host makes no writes to the cluster".into())
}

impl HostState {
    /// Sends a write through the plugin's writer, counting the wait as time
    /// blocked in the host.
    fn write(&mut self, request: host::WriteRequest) -> Result<Option<String>, WriteError> {
        let Some(writer) = &self.writer else {
            return Err(no_writer());
        };
        let started = std::time::Instant::now();
        let result = writer.write_blocking(request);
        self.deadline.waited(started.elapsed());
        result.map_err(to_wit_error)
    }
}

impl cluster::Host for HostState {
    fn create(
        &mut self,
        gvk: GroupVersionKind,
        namespace: Option<String>,
        object: String,
    ) -> Result<String, WriteError> {
        self.write(host::WriteRequest::Create {
            gvk: from_wit_gvk(gvk),
            namespace,
            object,
        })
        .map(Option::unwrap_or_default)
    }

    fn update(&mut self, target: ObjectRef, object: String) -> Result<String, WriteError> {
        self.write(host::WriteRequest::Update {
            target: from_wit_ref(target),
            object,
        })
        .map(Option::unwrap_or_default)
    }

    fn patch(&mut self, target: ObjectRef, patch_type: PatchType, patch: String) -> Result<String, WriteError> {
        self.write(host::WriteRequest::Patch {
            target: from_wit_ref(target),
            patch_type: match patch_type {
                PatchType::Merge => host::PatchType::Merge,
                PatchType::Json => host::PatchType::Json,
            },
            patch,
        })
        .map(Option::unwrap_or_default)
    }

    fn apply(&mut self, target: ObjectRef, object: String, force: bool) -> Result<String, WriteError> {
        self.write(host::WriteRequest::Apply {
            target: from_wit_ref(target),
            object,
            force,
        })
        .map(Option::unwrap_or_default)
    }

    fn delete(&mut self, target: ObjectRef, options: DeleteOptions) -> Result<(), WriteError> {
        self.write(host::WriteRequest::Delete {
            target: from_wit_ref(target),
            options: host::DeleteOptions {
                uid: options.uid,
                resource_version: options.resource_version,
                propagation: options.propagation.map(|propagation| match propagation {
                    Propagation::Orphan => host::Propagation::Orphan,
                    Propagation::Background => host::Propagation::Background,
                    Propagation::Foreground => host::Propagation::Foreground,
                }),
            },
        })
        .map(|_| ())
    }

    fn record_event(
        &mut self,
        regarding: ObjectRef,
        type_: EventType,
        reason: String,
        action: String,
        note: String,
    ) -> Result<(), WriteError> {
        let Some(writer) = &self.writer else {
            return Err(no_writer());
        };
        let event_type = match type_ {
            EventType::Normal => host::EventType::Normal,
            EventType::Warning => host::EventType::Warning,
        };
        let started = std::time::Instant::now();
        let result = writer.record_event_blocking(from_wit_ref(regarding), event_type, reason, action, note);
        self.deadline.waited(started.elapsed());
        result.map_err(to_wit_error)
    }
}

fn to_read_error(error: host::WriteError) -> ReadError {
    match error {
        host::WriteError::Denied(message) => ReadError::Denied(message),
        host::WriteError::Forbidden(message) => ReadError::Forbidden(message),
        host::WriteError::Throttled(message) => ReadError::Throttled(message),
        host::WriteError::Unavailable(message) => ReadError::Unavailable(message),
        host::WriteError::TooLarge(message) => ReadError::TooLarge(message),
        host::WriteError::Invalid(message)
        | host::WriteError::NotFound(message)
        | host::WriteError::Conflict(message) => ReadError::Invalid(message),
    }
}

impl HostState {
    /// Sends an uncached read through the plugin's writer, counting the wait
    /// as time blocked in the host.
    fn read(&mut self, request: host::ReadRequest) -> Result<Option<String>, ReadError> {
        let query = format!("read {request:?}");
        self.shared(query, Answer::Read, Answer::read, |this| {
            let Some(writer) = &this.writer else {
                return Err(ReadError::Denied("this host makes no reads from the API server".into()));
            };
            let started = std::time::Instant::now();
            let result = writer.read_blocking(request);
            this.deadline.waited(started.elapsed());
            result.map_err(to_read_error)
        })
    }
}

impl api::Host for HostState {
    fn get(
        &mut self,
        gvk: GroupVersionKind,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<String>, ReadError> {
        self.read(host::ReadRequest::get(from_wit_gvk(gvk), namespace.as_deref(), &name))
    }

    fn list(
        &mut self,
        gvk: GroupVersionKind,
        namespace: Option<String>,
        label_selector: Option<String>,
        limit: u32,
    ) -> Result<String, ReadError> {
        self.read(host::ReadRequest::list(
            from_wit_gvk(gvk),
            namespace.as_deref(),
            label_selector.as_deref(),
            limit,
        ))
        .map(Option::unwrap_or_default)
    }
}
