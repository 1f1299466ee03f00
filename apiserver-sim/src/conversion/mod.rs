//! Versions of one resource kept in one storage: how kube-apiserver converts an object between the version it stores and another version it serves.
//!
//! kube-apiserver keeps one storage behind `v1` and `events.k8s.io/v1`
//! Events (stored as `v1`), and converts an object into the version a
//! request names on the way in and out. The emulation does the same: a
//! resource served from another's objects names its [`Conversion`]
//! ([`ResourceDef::stored_as`](crate::ResourceDef::stored_as)), the store
//! keeps one collection, one event log and one set of names for both, and
//! every object read, listed, watched or written through the other version
//! is converted. Field selectors are converted too, as kube-apiserver's
//! field label conversions map them to the stored fields.

mod events;

use serde_json::Value;

use crate::store::ResourceId;

/// A served version of a resource whose objects are stored as another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Conversion {
    /// `events.k8s.io/v1` Events, stored as `v1` Events: `regarding` is
    /// `involvedObject`, `note` is `message`, `reportingController` is
    /// `reportingComponent`, and the `deprecated*` fields are the core
    /// Event's source, timestamps and count.
    EventsV1,
}

impl Conversion {
    /// The resource whose objects these are.
    #[must_use]
    pub(crate) fn storage(self) -> ResourceId {
        match self {
            Self::EventsV1 => ResourceId::new("", "v1", "events"),
        }
    }

    /// `object`, of the served version, as it is stored.
    #[must_use]
    pub(crate) fn stored(self, object: &Value) -> Value {
        match self {
            Self::EventsV1 => events::to_core(object),
        }
    }

    /// A stored object as the served version shows it.
    #[must_use]
    pub(crate) fn served(self, object: &Value) -> Value {
        match self {
            Self::EventsV1 => events::from_core(object),
        }
    }

    /// The stored field a field selector's `label` of the served version
    /// selects by; `None` for a label the version does not take.
    #[must_use]
    pub(crate) fn field_label(self, label: &str) -> Option<&'static str> {
        match self {
            Self::EventsV1 => events::field_label(label),
        }
    }
}
