//! One change to one object, as the host delivers it.

use std::cell::Cell;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;

use crate::Gvk;
use crate::bindings::kinformer::plugin0_1_0::types as wit;
use crate::bindings::kinformer::plugin0_2_0::deltas;

/// What happened to an object, in client-go's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// The object appeared: created, or seen for the first time.
    Added,
    /// The object changed; [`Delta::old_json`] holds the previous state.
    Updated,
    /// The object is gone; the delta carries its last known state.
    Deleted,
    /// The object was present in a relist of its resource.
    Replaced,
    /// A periodic resync of an unchanged object.
    Sync,
}

/// One change to one object.
///
/// The object is kept as the JSON the host sent; [`Delta::object`] parses it into
/// any serde type (a `k8s-openapi` type with the `k8s` feature, or your own struct
/// holding just the fields you need, which is cheaper), and [`Delta::value`] into
/// a `serde_json::Value`.
#[derive(Clone, Debug)]
pub struct Delta {
    delta_type: DeltaType,
    gvk: Gvk,
    key: String,
    resource_version: String,
    object: String,
    old_object: OldObject,
    initial_list: bool,
}

/// The previous state of an updated object.
#[derive(Clone, Debug)]
enum OldObject {
    /// There is none.
    None,
    /// It came with the delta.
    Here(String),
    /// The host keeps it while the batch is handled: fetched on first use.
    OnHost {
        batch: u64,
        index: u32,
        fetched: OnceLock<Option<String>>,
    },
}

std::thread_local! {
    /// The number of the batch being handled (the plugin is single-threaded).
    static BATCH: Cell<u64> = const { Cell::new(0) };
}

/// A text of a batch, which the host wrote from Rust strings: valid UTF-8,
/// as wit-bindgen takes the host's strings to be.
#[cfg(target_arch = "wasm32")]
#[allow(
    unsafe_code,
    reason = "the host writes UTF-8, and checking every object's bytes again costs as much as the copy"
)]
fn text_of(part: &[u8]) -> String {
    // SAFETY: the host writes each text from a `str`, whole; a host that did
    // not could hand the plugin any bytes as a `string` as well.
    unsafe { String::from_utf8_unchecked(part.to_vec()) }
}

/// A text of a batch; checked off wasm, where no host writes it.
#[cfg(not(target_arch = "wasm32"))]
fn text_of(part: &[u8]) -> String {
    String::from_utf8_lossy(part).into_owned()
}

fn delta_type_of(delta_type: wit::DeltaType) -> DeltaType {
    match delta_type {
        wit::DeltaType::Added => DeltaType::Added,
        wit::DeltaType::Updated => DeltaType::Updated,
        wit::DeltaType::Deleted => DeltaType::Deleted,
        wit::DeltaType::Replaced => DeltaType::Replaced,
        wit::DeltaType::Sync => DeltaType::Sync,
    }
}

impl Delta {
    #[doc(hidden)]
    #[must_use]
    pub fn from_wit(delta: wit::Delta) -> Self {
        Self {
            delta_type: delta_type_of(delta.type_),
            gvk: Gvk::from_wit(delta.gvk),
            key: delta.key,
            resource_version: delta.resource_version,
            object: delta.object,
            old_object: delta.old_object.map_or(OldObject::None, OldObject::Here),
            initial_list: delta.initial_list,
        }
    }

    /// The deltas of a batch as the host lays it out: their texts end to
    /// end, their old objects left on the host until asked for.
    #[doc(hidden)]
    #[must_use]
    pub fn from_batch(batch: deltas::DeltaBatch) -> Vec<Self> {
        let number = BATCH.get().wrapping_add(1);
        BATCH.set(number);
        let gvk = Gvk::from_wit(batch.gvk);
        let mut text = batch.text.as_slice();
        let mut take = |len: u32| {
            // The host sends lengths that add up to the text; anything more
            // is cut at its end.
            let at = usize::try_from(len).unwrap_or(usize::MAX).min(text.len());
            let (part, rest) = text.split_at(at);
            text = rest;
            text_of(part)
        };
        (0_u32..)
            .zip(batch.deltas)
            .map(|(index, entry)| Self {
                delta_type: delta_type_of(entry.type_),
                gvk: gvk.clone(),
                key: take(entry.key_len),
                resource_version: take(entry.resource_version_len),
                object: take(entry.object_len),
                old_object: if entry.has_old_object {
                    OldObject::OnHost {
                        batch: number,
                        index,
                        fetched: OnceLock::new(),
                    }
                } else {
                    OldObject::None
                },
                initial_list: entry.initial_list,
            })
            .collect()
    }

    /// What happened.
    #[must_use]
    pub fn delta_type(&self) -> DeltaType {
        self.delta_type
    }

    /// The resource type of the object.
    #[must_use]
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// The cache key: `namespace/name`, or `name` for cluster-scoped objects.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object's namespace; empty for cluster-scoped objects.
    #[must_use]
    pub fn namespace(&self) -> &str {
        self.key.split_once('/').map_or("", |(namespace, _)| namespace)
    }

    /// The object's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.key.split_once('/').map_or(&self.key, |(_, name)| name)
    }

    /// The object's `metadata.resourceVersion` in this state.
    #[must_use]
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// True for the initial list a plugin receives when it starts, before live
    /// changes.
    #[must_use]
    pub fn is_initial_list(&self) -> bool {
        self.initial_list
    }

    /// The object as JSON: the new state, or the last known state when deleted.
    #[must_use]
    pub fn json(&self) -> &str {
        &self.object
    }

    /// The previous state as JSON, for [`DeltaType::Updated`] only.
    ///
    /// The host sends it when first asked for: read it while handling the
    /// delta's batch. A delta kept past that answers `None`, unless it was
    /// read before.
    #[must_use]
    pub fn old_json(&self) -> Option<&str> {
        match &self.old_object {
            OldObject::None => None,
            OldObject::Here(old) => Some(old),
            OldObject::OnHost { batch, index, fetched } => fetched
                .get_or_init(|| (BATCH.get() == *batch).then(|| deltas::old_object(*index)).flatten())
                .as_deref(),
        }
    }

    /// Parses the object into `T`.
    ///
    /// # Errors
    ///
    /// When the JSON does not fit `T`.
    pub fn object<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.object)
    }

    /// Parses the previous state into `T`, for [`DeltaType::Updated`] only.
    ///
    /// # Errors
    ///
    /// When the JSON does not fit `T`.
    pub fn old_object<T: DeserializeOwned>(&self) -> serde_json::Result<Option<T>> {
        self.old_json().map(serde_json::from_str).transpose()
    }

    /// Parses the object into a `serde_json::Value`.
    ///
    /// # Errors
    ///
    /// When the host sent malformed JSON, which it never does.
    pub fn value(&self) -> serde_json::Result<serde_json::Value> {
        self.object()
    }
}
