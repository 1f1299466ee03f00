//! The `cluster` interface: a plugin's writes to the cluster.
//!
//! Each call becomes a [`crate::apiserver::WriteRequest`] for the plugin's
//! [`Writer`], which validates it, checks the grant, rate-limits, sends and
//! audits it. Without a writer (the host has no cluster connection, as in
//! `kinformer check`), every call answers `denied`. The time a call waits for
//! the API server is given back to the plugin's deadline.

use wasmtime::component::Linker;

use super::{HostState, View, Viewed, from_wit_gvk};
use crate::apiserver::{self as host, Writer};
use crate::plugin::v0_1::kinformer::plugin::cluster::{
    self, DeleteOptions, EventType, ObjectRef, PatchType, Propagation, WriteError,
};
use crate::plugin::v0_1::kinformer::plugin::types::GroupVersionKind;

/// Where a plugin's writes go.
pub(crate) struct Writes {
    /// `None` denies them all.
    writer: Option<Writer>,
}

impl Writes {
    pub(crate) fn new(writer: Option<Writer>) -> Self {
        Self { writer }
    }
}

/// Adds `cluster` to the linker.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    cluster::add_to_linker::<_, Viewed<Writes>>(linker, |state| View {
        state: &mut state.writes,
        call: &mut state.call,
    })
}

fn from_wit_ref(target: ObjectRef) -> host::ObjectRef {
    host::ObjectRef {
        gvk: from_wit_gvk(target.gvk),
        namespace: target.namespace,
        name: target.name,
        subresource: target.subresource,
    }
}

/// Declares `to_wit_error`, from the host's list of kinds.
macro_rules! to_wit_error {
    ($($(#[$doc:meta])* $variant:ident = $kind:literal, read $read:ident;)*) => {
        /// The contract's `write-error` of a failed write.
        fn to_wit_error(error: host::WriteError) -> WriteError {
            match error {
                $(host::WriteError::$variant(message) => WriteError::$variant(message),)*
            }
        }
    };
}
host::write_error_kinds!(to_wit_error);

fn no_writer() -> host::WriteError {
    host::WriteError::Denied("this host makes no writes to the cluster".into())
}

impl View<'_, Writes> {
    /// Sends a write through the plugin's writer, counting the wait as time
    /// blocked in the host.
    fn write(&mut self, request: host::WriteRequest) -> Result<Option<String>, WriteError> {
        self.blocked(|writes| {
            let writer = writes.writer.as_ref().ok_or_else(no_writer)?;
            writer.write_blocking(request)
        })
        .map_err(to_wit_error)
    }
}

impl cluster::Host for View<'_, Writes> {
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
        let event_type = match type_ {
            EventType::Normal => host::EventType::Normal,
            EventType::Warning => host::EventType::Warning,
        };
        let regarding = from_wit_ref(regarding);
        self.blocked(|writes| {
            let writer = writes.writer.as_ref().ok_or_else(no_writer)?;
            writer.record_event_blocking(regarding, event_type, reason, action, note)
        })
        .map_err(to_wit_error)
    }
}
