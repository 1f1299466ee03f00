//! Read the host's indexed cache.
//!
//! Answers come from the host's memory, never from the API server, and may be
//! slightly stale. Every answer is bounded by the host's per-call limits; a list
//! that was cut short says so in [`ObjectList::truncated`].
//!
//! # Examples
//!
//! ```no_run
//! use kinformer_sdk::{cache, Gvk};
//!
//! # fn run() -> kinformer_sdk::Result<()> {
//! let pods = Gvk::new("", "v1", "Pod");
//! let web = cache::list(&pods).namespace("shop").label_selector("app=web").fetch()?;
//! let on_node = cache::by_index(&pods, "node", "worker-1", 0)?;
//! let one: Option<String> = cache::get(&pods, "shop/web-0")?;
//! # Ok(()) }
//! ```

use std::fmt;

use serde::de::DeserializeOwned;

use crate::Gvk;
use crate::bindings::kinformer::plugin0_1_0::cache as wit;

/// Why a cache query was not answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// The plugin is not granted read access to this resource or namespace.
    Denied(String),
    /// An argument was malformed.
    InvalidArgument(String),
    /// The host has no cache for this resource: nothing subscribes to it.
    NotCached(String),
    /// The index does not exist on this resource's cache.
    UnknownIndex(String),
    /// An object in the answer did not parse into the requested type.
    Parse(String),
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied(why) => write!(f, "cache query denied: {why}"),
            Self::InvalidArgument(why) => write!(f, "invalid cache query: {why}"),
            Self::NotCached(why) => write!(f, "resource not cached: {why}"),
            Self::UnknownIndex(why) => write!(f, "unknown index: {why}"),
            Self::Parse(why) => write!(f, "cached object did not parse: {why}"),
        }
    }
}

impl std::error::Error for CacheError {}

impl From<wit::CacheError> for CacheError {
    fn from(error: wit::CacheError) -> Self {
        match error {
            wit::CacheError::Denied(why) => Self::Denied(why),
            wit::CacheError::InvalidArgument(why) => Self::InvalidArgument(why),
            wit::CacheError::NotCached(why) => Self::NotCached(why),
            wit::CacheError::UnknownIndex(why) => Self::UnknownIndex(why),
        }
    }
}

/// A bounded list of objects as JSON, ordered by key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectList {
    /// The objects as JSON.
    pub objects: Vec<String>,
    /// True when more objects matched than were returned.
    pub truncated: bool,
}

impl ObjectList {
    /// Parses every object into `T`.
    ///
    /// # Errors
    ///
    /// [`CacheError::Parse`] when an object does not fit `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<Vec<T>, CacheError> {
        self.objects
            .iter()
            .map(|json| serde_json::from_str(json).map_err(|error| CacheError::Parse(error.to_string())))
            .collect()
    }
}

impl From<wit::ObjectList> for ObjectList {
    fn from(list: wit::ObjectList) -> Self {
        Self {
            objects: list.objects,
            truncated: list.truncated,
        }
    }
}

/// The cached object with this key (`namespace/name`, or `name` for
/// cluster-scoped objects).
///
/// # Errors
///
/// When the resource is not cached or not granted, or the key is malformed.
pub fn get(gvk: &Gvk, key: &str) -> Result<Option<String>, CacheError> {
    #[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
    return crate::testing::get(gvk, key);
    #[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
    wit::get(&gvk.to_wit(), key).map_err(CacheError::from)
}

/// Like [`get`], parsed into `T`.
///
/// # Errors
///
/// As [`get`], and [`CacheError::Parse`] when the object does not fit `T`.
pub fn get_as<T: DeserializeOwned>(gvk: &Gvk, key: &str) -> Result<Option<T>, CacheError> {
    get(gvk, key)?
        .map(|json| serde_json::from_str(&json).map_err(|error| CacheError::Parse(error.to_string())))
        .transpose()
}

/// Starts a list query over `gvk`'s cache; narrow it and call [`ListQuery::fetch`].
pub fn list(gvk: &Gvk) -> ListQuery<'_> {
    ListQuery {
        gvk,
        namespace: None,
        label_selector: None,
        limit: 0,
    }
}

/// A list query under construction; see [`list`].
#[derive(Debug)]
#[must_use = "a query does nothing until fetched"]
pub struct ListQuery<'a> {
    gvk: &'a Gvk,
    namespace: Option<String>,
    label_selector: Option<String>,
    limit: u32,
}

impl ListQuery<'_> {
    /// Only objects in this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only objects matching this label selector (`app=web,tier in (a,b),!canary`).
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// At most this many objects (the host's per-call limit applies regardless).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Runs the query.
    ///
    /// # Errors
    ///
    /// When the resource is not cached or not granted, or the selector is malformed.
    pub fn fetch(self) -> Result<ObjectList, CacheError> {
        #[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
        return crate::testing::list(
            self.gvk,
            self.namespace.as_deref(),
            self.label_selector.as_deref(),
            self.limit,
        );
        #[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
        let query = wit::ListQuery {
            namespace: self.namespace,
            label_selector: self.label_selector,
            limit: self.limit,
        };
        #[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
        wit::list_objects(&self.gvk.to_wit(), &query)
            .map(ObjectList::from)
            .map_err(CacheError::from)
    }
}

/// The objects whose index `index` holds `value`, at most `limit` (0: the host's
/// per-call limit). Built-in indexes: `namespace`, `owner` (owner uid) and
/// `label:<key>`; others are declared with [`crate::Registration::index`].
///
/// # Errors
///
/// When the resource is not cached or not granted, or the index does not exist.
pub fn by_index(gvk: &Gvk, index: &str, value: &str, limit: u32) -> Result<ObjectList, CacheError> {
    #[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
    return crate::testing::by_index(gvk, index, value, limit);
    #[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
    wit::by_index(&gvk.to_wit(), index, value, limit)
        .map(ObjectList::from)
        .map_err(CacheError::from)
}

/// The values index `index` currently holds, sorted.
///
/// # Errors
///
/// When the resource is not cached or not granted, or the index does not exist.
pub fn index_values(gvk: &Gvk, index: &str) -> Result<Vec<String>, CacheError> {
    #[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
    return crate::testing::index_values(gvk, index);
    #[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
    wit::index_values(&gvk.to_wit(), index).map_err(CacheError::from)
}
