//! Write to the cluster, within the operator's write grant.
//!
//! Every write is checked by the host against the plugin's write grant (in the
//! manifest beside the plugin; the default grant writes nothing), counted
//! against the plugin's write rate, logged in the host's audit and sent with
//! the plugin's name as field manager. In dry-run mode, set by the operator,
//! the API server validates each write and persists nothing; the answers look
//! the same. Waiting for the API server does not count against the call's
//! deadline; a write has a timeout of its own.
//!
//! Objects and patches are anything that serialises to JSON: a
//! `serde_json::json!` value, or a typed object with the SDK's `k8s` feature.
//! A missing `apiVersion`, `kind` or `metadata.name` is filled in from the
//! target.
//!
//! # Examples
//!
//! ```no_run
//! use kinformer_sdk::cluster::{self, EventType, ObjectRef, PatchType};
//! use kinformer_sdk::Gvk;
//! use serde_json::json;
//!
//! # fn run() -> kinformer_sdk::Result<()> {
//! let deployments = Gvk::new("apps", "v1", "Deployment");
//! let web = ObjectRef::new(&deployments, Some("shop"), "web");
//!
//! // Scale through the scale subresource (needs `patch` on apps/v1/Deployment/scale).
//! cluster::patch(&web.clone().subresource("scale"), PatchType::Merge, &json!({"spec": {"replicas": 3}}))?;
//!
//! // Own a label with server-side apply.
//! cluster::apply(&web, &json!({"metadata": {"labels": {"tier": "frontend"}}}), false)?;
//!
//! // Tell people (needs `create` on events.k8s.io/v1/Event).
//! cluster::record_event(&web, EventType::Normal, "Scaled", "Scale", "scaled to 3 replicas")?;
//! # Ok(()) }
//! ```

use serde::Serialize;

use crate::Gvk;
use crate::bindings::kinformer::plugin0_1_0::cluster as wit;
use crate::error::error_kinds;

error_kinds! {
    /// Why a write was not done.
    WriteError, shown as "write", from wit::WriteError {
        /// Outside the plugin's write grant: nothing was sent.
        Denied = "denied",
        /// The API server refused it (its RBAC).
        Forbidden = "forbidden",
        /// A precondition failed: a stale resourceVersion or uid, an object that
        /// exists already, fields another manager owns.
        Conflict = "conflict",
        /// The object does not exist.
        NotFound = "not-found",
        /// The request was malformed, or the server rejected the object or patch:
        /// what is wrong.
        Invalid = "invalid",
        /// Over the plugin's write rate (or its event rate for one object), or the
        /// server asked to slow down. Try again later; a controller requeues.
        Throttled = "throttled",
        /// The server could not be reached in time or failed.
        Unavailable = "unavailable",
        /// The object or patch is too large (over 1 MiB, or the server's limit).
        TooLarge = "too-large",
    }
}

/// An object to write, or one of its subresources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    gvk: Gvk,
    namespace: Option<String>,
    name: String,
    subresource: Option<String>,
}

impl ObjectRef {
    /// The object `name` of type `gvk` in `namespace` (`None` for a
    /// cluster-scoped object).
    #[must_use]
    pub fn new(gvk: &Gvk, namespace: Option<&str>, name: impl Into<String>) -> Self {
        Self {
            gvk: gvk.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.into(),
            subresource: None,
        }
    }

    /// The object with this cache key (`namespace/name`, or `name` for a
    /// cluster-scoped object), as in [`crate::Delta::key`].
    #[must_use]
    pub fn from_key(gvk: &Gvk, key: &str) -> Self {
        match key.split_once('/') {
            Some((namespace, name)) => Self::new(gvk, Some(namespace), name),
            None => Self::new(gvk, None, key),
        }
    }

    /// Its subresource: `status` or `scale`.
    #[must_use]
    pub fn subresource(mut self, subresource: impl Into<String>) -> Self {
        self.subresource = Some(subresource.into());
        self
    }

    /// Its type.
    #[must_use]
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// Its namespace; `None` for a cluster-scoped object.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// Its name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    fn to_wit(&self) -> wit::ObjectRef {
        wit::ObjectRef {
            gvk: self.gvk.to_wit(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            subresource: self.subresource.clone(),
        }
    }
}

/// How a patch is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch: `{"spec": {"replicas": 3}}`.
    Merge,
    /// RFC 6902 JSON patch: `[{"op": "replace", "path": "/spec/replicas", "value": 3}]`.
    Json,
}

/// What a delete does to the object's dependents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// They are left without an owner.
    Orphan,
    /// They are deleted after the object, in the background.
    Background,
    /// The object waits for them to be deleted first.
    Foreground,
}

/// Conditions and policy of a delete; the default deletes unconditionally,
/// with the server's default propagation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct DeleteOptions {
    uid: Option<String>,
    resource_version: Option<String>,
    propagation: Option<Propagation>,
}

impl DeleteOptions {
    /// Delete only while the object has this uid (not a new object of the
    /// same name).
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    /// Delete only while the object is at this resourceVersion.
    pub fn resource_version(mut self, resource_version: impl Into<String>) -> Self {
        self.resource_version = Some(resource_version.into());
        self
    }

    /// What happens to the object's dependents.
    pub fn propagation(mut self, propagation: Propagation) -> Self {
        self.propagation = Some(propagation);
        self
    }
}

/// An Event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something may need attention.
    Warning,
}

fn json(what: &str, value: &impl Serialize) -> Result<String, WriteError> {
    serde_json::to_string(value).map_err(|error| WriteError::Invalid(format!("the {what} is not JSON: {error}")))
}

/// Creates `object` (with `metadata.name` or `metadata.generateName`) in
/// `namespace` (`None` for a cluster-scoped type); returns it as stored.
/// Needs `create` on its type.
///
/// # Errors
///
/// As the host answers; see [`WriteError`]. An object that exists already is
/// a [`WriteError::Conflict`].
pub fn create(gvk: &Gvk, namespace: Option<&str>, object: &impl Serialize) -> Result<String, WriteError> {
    let object = json("object", object)?;
    wit::create(&gvk.to_wit(), namespace, &object).map_err(WriteError::from)
}

/// Replaces an object or its subresource with `object`; when the object
/// carries `metadata.resourceVersion`, it must still be the server's (else a
/// [`WriteError::Conflict`]). Returns it as stored. Needs `update`.
///
/// # Errors
///
/// As the host answers; see [`WriteError`].
pub fn update(target: &ObjectRef, object: &impl Serialize) -> Result<String, WriteError> {
    let object = json("object", object)?;
    wit::update(&target.to_wit(), &object).map_err(WriteError::from)
}

/// Patches an object or its subresource; returns it as stored. Needs `patch`.
///
/// # Errors
///
/// As the host answers; see [`WriteError`].
pub fn patch(target: &ObjectRef, patch_type: PatchType, patch: &impl Serialize) -> Result<String, WriteError> {
    let patch = json("patch", patch)?;
    let patch_type = match patch_type {
        PatchType::Merge => wit::PatchType::Merge,
        PatchType::Json => wit::PatchType::Json,
    };
    wit::patch(&target.to_wit(), patch_type, &patch).map_err(WriteError::from)
}

/// Server-side apply of `object` with the plugin's name as field manager:
/// the plugin owns the fields it sets; `force` takes over fields other
/// managers own (else those are a [`WriteError::Conflict`]). Returns the
/// object as stored. Needs `apply`.
///
/// # Errors
///
/// As the host answers; see [`WriteError`].
pub fn apply(target: &ObjectRef, object: &impl Serialize, force: bool) -> Result<String, WriteError> {
    let object = json("object", object)?;
    wit::apply(&target.to_wit(), &object, force).map_err(WriteError::from)
}

/// Deletes an object. Needs `delete`.
///
/// # Errors
///
/// As the host answers; see [`WriteError`]. A failed precondition is a
/// [`WriteError::Conflict`].
pub fn delete(target: &ObjectRef, options: &DeleteOptions) -> Result<(), WriteError> {
    let options = wit::DeleteOptions {
        uid: options.uid.clone(),
        resource_version: options.resource_version.clone(),
        propagation: options.propagation.map(|propagation| match propagation {
            Propagation::Orphan => wit::Propagation::Orphan,
            Propagation::Background => wit::Propagation::Background,
            Propagation::Foreground => wit::Propagation::Foreground,
        }),
    };
    wit::delete(&target.to_wit(), &options).map_err(WriteError::from)
}

/// Records an `events.k8s.io/v1` Event about `regarding` (its subresource, if
/// any, is left out), reported as `kinformer/<plugin>`: `reason` in
/// UpperCamelCase (`ScaledUp`), `action` what was done (`Scale`), `note` for
/// humans (at most 1 KiB). The same event again within ten minutes counts in
/// the first one's series; more than 25 events about one object, then more
/// than one per five minutes, are [`WriteError::Throttled`]. Needs `create` on
/// `events.k8s.io/v1/Event` in the object's namespace (`default` for a
/// cluster-scoped one).
///
/// # Errors
///
/// As the host answers; see [`WriteError`].
pub fn record_event(
    regarding: &ObjectRef,
    event_type: EventType,
    reason: &str,
    action: &str,
    note: &str,
) -> Result<(), WriteError> {
    let event_type = match event_type {
        EventType::Normal => wit::EventType::Normal,
        EventType::Warning => wit::EventType::Warning,
    };
    wit::record_event(&regarding.to_wit(), event_type, reason, action, note).map_err(WriteError::from)
}
