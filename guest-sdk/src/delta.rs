//! One change to one object, as the host delivers it.

use std::cell::Cell;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;

use crate::Gvk;
use crate::bindings::kinformer::plugin0_1_0::types as wit;
use crate::bindings::kinformer::plugin0_2_0::deltas;

/// What happened to an object, in client-go's terms: for
/// [`DeltaType::Updated`], [`Delta::old_json`] holds the previous state.
pub use kinformer_contract::DeltaType;

/// One change to one object.
///
/// The object is kept as the JSON the host sent; [`Delta::object`] parses it into
/// any serde type (a `k8s-openapi` type with the `k8s` feature, or your own struct
/// holding just the fields you need, which is cheaper), and [`Delta::value`] into
/// a `serde_json::Value`.
#[derive(Clone, Debug)]
pub struct Delta {
    delta_type: DeltaType,
    gvk: Arc<Gvk>,
    /// The texts of the delta's batch, shared by its deltas: each delta's
    /// key, resourceVersion and object are ranges of it.
    text: Arc<String>,
    key: Range<u32>,
    resource_version: Range<u32>,
    object: Range<u32>,
    old_object: OldObject,
    initial_list: bool,
}

/// The ranges of texts laid end to end, taken one after the other.
#[derive(Default)]
struct EndToEnd(u32);

impl EndToEnd {
    /// The range of the next text, `len` bytes long.
    fn take(&mut self, len: u32) -> Range<u32> {
        let start = self.0;
        self.0 = start.saturating_add(len);
        start..self.0
    }

    /// The range of the next text, `text` itself.
    fn take_text(&mut self, text: &str) -> Range<u32> {
        // A text is far below 4 GiB: the host bounds what it caches.
        self.take(u32::try_from(text.len()).unwrap_or(u32::MAX))
    }
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

/// The texts of a batch, which the host wrote from Rust strings: valid
/// UTF-8, as wit-bindgen takes the host's strings to be.
#[cfg(target_arch = "wasm32")]
#[allow(
    unsafe_code,
    reason = "the host writes UTF-8; checking it again would read every byte of every batch once more"
)]
fn text_of(bytes: Vec<u8>) -> String {
    // SAFETY: the host writes each text from a `str`, whole, and texts end to
    // end are UTF-8 as well; a host that did not could hand the plugin any
    // bytes as a `string` too. Ranges off a character boundary are refused
    // when sliced.
    unsafe { String::from_utf8_unchecked(bytes) }
}

/// The texts of a batch; checked off wasm, where no host writes them.
#[cfg(not(target_arch = "wasm32"))]
fn text_of(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
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
        let mut ranges = EndToEnd::default();
        let (key, resource_version, object) = (
            ranges.take_text(&delta.key),
            ranges.take_text(&delta.resource_version),
            ranges.take_text(&delta.object),
        );
        let text = [delta.key, delta.resource_version, delta.object].concat();
        Self {
            delta_type: delta_type_of(delta.type_),
            gvk: Arc::new(Gvk::from_wit(delta.gvk)),
            text: Arc::new(text),
            key,
            resource_version,
            object,
            old_object: delta.old_object.map_or(OldObject::None, OldObject::Here),
            initial_list: delta.initial_list,
        }
    }

    /// The deltas of a batch as the host lays it out: their texts end to
    /// end, kept as one buffer they share, their old objects left on the
    /// host until asked for.
    #[doc(hidden)]
    #[must_use]
    pub fn from_batch(batch: deltas::DeltaBatch) -> Vec<Self> {
        let number = BATCH.get().wrapping_add(1);
        BATCH.set(number);
        let gvk = Arc::new(Gvk::from_wit(batch.gvk));
        let text = Arc::new(text_of(batch.text));
        let mut ranges = EndToEnd::default();
        (0_u32..)
            .zip(batch.deltas)
            .map(|(index, entry)| Self {
                delta_type: delta_type_of(entry.type_),
                gvk: Arc::clone(&gvk),
                text: Arc::clone(&text),
                key: ranges.take(entry.key_len),
                resource_version: ranges.take(entry.resource_version_len),
                object: ranges.take(entry.object_len),
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

    /// One of the delta's texts; empty for a range the host's lengths put
    /// outside its batch's text, or off a character boundary.
    fn part(&self, range: &Range<u32>) -> &str {
        let at = |offset: u32| usize::try_from(offset).unwrap_or(usize::MAX);
        self.text.get(at(range.start)..at(range.end)).unwrap_or_default()
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
        self.part(&self.key)
    }

    /// The object's namespace; empty for cluster-scoped objects.
    #[must_use]
    pub fn namespace(&self) -> &str {
        self.key().split_once('/').map_or("", |(namespace, _)| namespace)
    }

    /// The object's name.
    #[must_use]
    pub fn name(&self) -> &str {
        let key = self.key();
        key.split_once('/').map_or(key, |(_, name)| name)
    }

    /// The object's `metadata.resourceVersion` in this state.
    #[must_use]
    pub fn resource_version(&self) -> &str {
        self.part(&self.resource_version)
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
        self.part(&self.object)
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
        serde_json::from_str(self.json())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn gvk() -> wit::GroupVersionKind {
        wit::GroupVersionKind {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        }
    }

    fn entry(type_: wit::DeltaType, lens: [usize; 3], has_old_object: bool) -> deltas::DeltaEntry {
        let len = |at: usize| u32::try_from(lens[at]).unwrap();
        deltas::DeltaEntry {
            type_,
            key_len: len(0),
            resource_version_len: len(1),
            object_len: len(2),
            has_old_object,
            initial_list: false,
        }
    }

    #[test]
    fn a_batch_s_deltas_slice_its_shared_text() {
        let first = ["tëam/wëb", "41", r#"{"metadata":{"name":"wëb"}}"#];
        let second = ["db", "42", r#"{"metadata":{"name":"db"}}"#];
        let text = first.iter().chain(&second).copied().collect::<String>().into_bytes();
        let batch = deltas::DeltaBatch {
            gvk: gvk(),
            text,
            deltas: vec![
                entry(wit::DeltaType::Updated, first.map(str::len), true),
                entry(wit::DeltaType::Deleted, second.map(str::len), false),
            ],
        };
        let deltas = Delta::from_batch(batch);
        assert_eq!(deltas.len(), 2);
        assert_eq!(
            (deltas[0].key(), deltas[0].namespace(), deltas[0].name()),
            ("tëam/wëb", "tëam", "wëb")
        );
        assert_eq!(deltas[0].resource_version(), "41");
        assert_eq!(deltas[0].json(), first[2]);
        assert_eq!(deltas[0].delta_type(), DeltaType::Updated);
        assert_eq!(
            (deltas[1].key(), deltas[1].namespace(), deltas[1].name()),
            ("db", "", "db")
        );
        assert_eq!(deltas[1].resource_version(), "42");
        assert_eq!(deltas[1].value().unwrap()["metadata"]["name"], "db");
        assert_eq!(deltas[1].gvk().kind, "Deployment");
        assert!(
            Arc::ptr_eq(&deltas[0].text, &deltas[1].text),
            "the deltas share one text"
        );
    }

    #[test]
    fn lengths_past_the_text_or_inside_a_character_give_empty_texts() {
        let batch = deltas::DeltaBatch {
            gvk: gvk(),
            text: "ëx".as_bytes().to_vec(),
            // The key ends inside `ë`; the object runs past the text.
            deltas: vec![entry(wit::DeltaType::Added, [1, 2, 10], false)],
        };
        let deltas = Delta::from_batch(batch);
        assert_eq!(
            (deltas[0].key(), deltas[0].resource_version(), deltas[0].json()),
            ("", "", "")
        );
    }

    #[test]
    fn a_0_1_0_delta_keeps_its_own_texts() {
        let delta = Delta::from_wit(wit::Delta {
            type_: wit::DeltaType::Updated,
            gvk: gvk(),
            key: "ns/a".into(),
            resource_version: "7".into(),
            object: "{}".into(),
            old_object: Some(r#"{"old":true}"#.into()),
            initial_list: true,
        });
        assert_eq!(
            (delta.key(), delta.resource_version(), delta.json()),
            ("ns/a", "7", "{}")
        );
        assert_eq!(delta.old_json(), Some(r#"{"old":true}"#));
        assert!(delta.is_initial_list());
    }
}
