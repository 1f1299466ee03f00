//! Drive a [`Handler`] natively, without wasmtime: `cargo test` on a plugin
//! crate runs its logic against an in-memory cache (feature `testing`).
//!
//! On a native target with this feature, the [`cache`](crate::cache) queries
//! and the log macros of the test's thread answer from a [`Harness`] instead
//! of the host: `get`, `list` (namespace and label selector, as the host
//! matches them), `by_index` and `index_values` over the built-in indexes
//! (`namespace`, `owner`, `label:<key>`) and the ones the plugin registered.
//! Grants and limits are the host's business and are not modelled.
//!
//! # Examples
//!
//! ```ignore
//! use kinformer_sdk::testing::Harness;
//! use kinformer_sdk::Gvk;
//! use serde_json::json;
//!
//! #[test]
//! fn logs_each_pod() {
//!     let mut plugin = Harness::<MyPlugin>::init("v1/Pod").unwrap();
//!     let pods = Gvk::new("", "v1", "Pod");
//!     plugin.add(&pods, json!({"metadata": {"name": "web-0", "namespace": "shop"}})).unwrap();
//!     assert_eq!(plugin.take_logs(), ["Added Pod shop/web-0 rv="]);
//! }
//! ```

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::api::ReadError;
use crate::bindings::kinformer::plugin0_1_0::types as wit;
use crate::cache::{CacheError, ObjectList};
use crate::log::Level;
use crate::{Delta, Gvk, Handler, Registration, Result};

/// What the cache queries of this thread answer from.
#[derive(Default)]
struct Cache {
    /// Objects per resource, by key.
    objects: HashMap<Gvk, BTreeMap<String, Value>>,
    /// Declared indexes: (resource, name) to field path.
    indexes: HashMap<(Gvk, String), String>,
    logs: Vec<(Level, String)>,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::default();
}

/// A handler and the in-memory cache it queries.
#[derive(Debug)]
pub struct Harness<H> {
    handler: H,
    registration: Registration,
}

impl<H: Handler> Harness<H> {
    /// Runs [`Handler::init`] with `config` against an empty cache with the
    /// resources and indexes it registers.
    ///
    /// # Errors
    ///
    /// What `init` returns.
    pub fn init(config: &str) -> Result<Self> {
        CACHE.with_borrow_mut(|cache| *cache = Cache::default());
        let (handler, registration) = H::init(config)?;
        let wit = registration.clone().into_wit();
        CACHE.with_borrow_mut(|cache| {
            for subscription in wit.subscriptions {
                cache.objects.entry(Gvk::from_wit(subscription.gvk)).or_default();
            }
            for index in wit.indexes {
                cache
                    .indexes
                    .insert((Gvk::from_wit(index.gvk), index.name), index.field_path);
            }
        });
        Ok(Self { handler, registration })
    }

    /// What `init` registered.
    #[must_use]
    pub fn registration(&self) -> &Registration {
        &self.registration
    }

    /// The handler, to inspect its state.
    #[must_use]
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Puts `object` into the cache without telling the handler.
    pub fn insert(&mut self, gvk: &Gvk, object: Value) {
        let key = key_of(&object);
        CACHE.with_borrow_mut(|cache| cache.objects.entry(gvk.clone()).or_default().insert(key, object));
    }

    /// Puts `object` into the cache and hands the handler an `Added` delta.
    ///
    /// # Errors
    ///
    /// What `handle` returns.
    pub fn add(&mut self, gvk: &Gvk, object: Value) -> Result<()> {
        self.insert(gvk, object.clone());
        self.deliver(wit::DeltaType::Added, gvk, object, None)
    }

    /// Replaces the cached object and hands the handler an `Updated` delta
    /// with the previous state (an `Added` one when there was none).
    ///
    /// # Errors
    ///
    /// What `handle` returns.
    pub fn update(&mut self, gvk: &Gvk, object: Value) -> Result<()> {
        let key = key_of(&object);
        let old = CACHE.with_borrow_mut(|cache| {
            cache
                .objects
                .entry(gvk.clone())
                .or_default()
                .insert(key, object.clone())
        });
        match old {
            Some(old) => self.deliver(wit::DeltaType::Updated, gvk, object, Some(old)),
            None => self.deliver(wit::DeltaType::Added, gvk, object, None),
        }
    }

    /// Removes the object with `key` from the cache and hands the handler a
    /// `Deleted` delta with its last state; nothing when it is not cached.
    ///
    /// # Errors
    ///
    /// What `handle` returns.
    pub fn delete(&mut self, gvk: &Gvk, key: &str) -> Result<()> {
        let gone = CACHE.with_borrow_mut(|cache| cache.objects.get_mut(gvk).and_then(|objects| objects.remove(key)));
        match gone {
            Some(object) => self.deliver(wit::DeltaType::Deleted, gvk, object, None),
            None => Ok(()),
        }
    }

    /// The lines logged since the last call, without their levels.
    pub fn take_logs(&mut self) -> Vec<String> {
        self.take_logs_with_levels().into_iter().map(|(_, line)| line).collect()
    }

    /// The lines logged since the last call, with their levels.
    pub fn take_logs_with_levels(&mut self) -> Vec<(Level, String)> {
        CACHE.with_borrow_mut(|cache| std::mem::take(&mut cache.logs))
    }

    fn deliver(&mut self, delta_type: wit::DeltaType, gvk: &Gvk, object: Value, old: Option<Value>) -> Result<()> {
        let delta = wit::Delta {
            type_: delta_type,
            gvk: gvk.to_wit(),
            key: key_of(&object),
            resource_version: object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            object: object.to_string(),
            old_object: old.map(|old| old.to_string()),
            initial_list: false,
        };
        self.handler.handle(Delta::from_wit(delta))
    }
}

/// `namespace/name`, or `name` without a namespace.
fn key_of(object: &Value) -> String {
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    match metadata["namespace"].as_str() {
        Some(namespace) if !namespace.is_empty() => format!("{namespace}/{name}"),
        _ => name.to_owned(),
    }
}

/// The values an index holds for `object`.
fn index_values_of(cache: &Cache, gvk: &Gvk, index: &str, object: &Value) -> Result<Vec<String>, CacheError> {
    let metadata = &object["metadata"];
    let values = match index {
        "namespace" => metadata["namespace"].as_str().map(str::to_owned).into_iter().collect(),
        "owner" => metadata["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|owner| owner["uid"].as_str().map(str::to_owned))
            .collect(),
        label if label.starts_with("label:") => metadata["labels"][&label["label:".len()..]]
            .as_str()
            .map(str::to_owned)
            .into_iter()
            .collect(),
        name => {
            let path = cache
                .indexes
                .get(&(gvk.clone(), name.to_owned()))
                .ok_or_else(|| CacheError::UnknownIndex(format!("{name} on {}", gvk.kind)))?;
            let found = path.split('.').fold(object, |value, step| &value[step]);
            let scalar = |value: &Value| match value {
                Value::String(text) => Some(text.clone()),
                Value::Number(number) => Some(number.to_string()),
                Value::Bool(flag) => Some(flag.to_string()),
                _ => None,
            };
            match found {
                Value::Array(items) => items.iter().filter_map(scalar).collect(),
                value => scalar(value).into_iter().collect(),
            }
        }
    };
    Ok(values)
}

/// The objects of `gvk` that `keep` selects, at most `limit` (0: all).
fn select(
    gvk: &Gvk,
    limit: u32,
    mut keep: impl FnMut(&Cache, &Value) -> Result<bool, CacheError>,
) -> Result<ObjectList, CacheError> {
    CACHE.with_borrow(|cache| {
        let objects = cache
            .objects
            .get(gvk)
            .ok_or_else(|| CacheError::NotCached(format!("{}/{} {}", gvk.group, gvk.version, gvk.kind)))?;
        let mut list = ObjectList::default();
        for object in objects.values() {
            if keep(cache, object)? {
                if limit != 0 && list.objects.len() == limit as usize {
                    list.truncated = true;
                    break;
                }
                list.objects.push(object.to_string());
            }
        }
        Ok(list)
    })
}

pub(crate) fn get(gvk: &Gvk, key: &str) -> Result<Option<String>, CacheError> {
    if key.is_empty() {
        return Err(CacheError::InvalidArgument("empty key".into()));
    }
    let list = select(gvk, 0, |_, object| Ok(key_of(object) == key))?;
    Ok(list.objects.into_iter().next())
}

pub(crate) fn list(
    gvk: &Gvk,
    namespace: Option<&str>,
    selector: Option<&str>,
    limit: u32,
) -> Result<ObjectList, CacheError> {
    let selector = kinformer_selector::Selector::parse(selector.unwrap_or_default())
        .map_err(|error| CacheError::InvalidArgument(error.to_string()))?;
    select(gvk, limit, |_, object| {
        let labels: BTreeMap<String, String> = object["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned())))
            .collect();
        let in_namespace = namespace.is_none_or(|namespace| object["metadata"]["namespace"] == namespace);
        Ok(in_namespace && selector.matches(&labels))
    })
}

pub(crate) fn by_index(gvk: &Gvk, index: &str, value: &str, limit: u32) -> Result<ObjectList, CacheError> {
    select(gvk, limit, |cache, object| {
        Ok(index_values_of(cache, gvk, index, object)?
            .iter()
            .any(|held| held == value))
    })
}

pub(crate) fn index_values(gvk: &Gvk, index: &str) -> Result<Vec<String>, CacheError> {
    let mut values = std::collections::BTreeSet::new();
    select(gvk, 0, |cache, object| {
        values.extend(index_values_of(cache, gvk, index, object)?);
        Ok(false)
    })?;
    Ok(values.into_iter().collect())
}

pub(crate) fn log(level: Level, message: &str) {
    CACHE.with_borrow_mut(|cache| cache.logs.push((level, message.to_owned())));
}

/// An uncached read answers from the harness's objects too: add PodMetrics
/// (or anything else a plugin reads through [`crate::api`]) with
/// [`Harness::add`].
pub(crate) fn api_get(gvk: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<Value>, ReadError> {
    let key = match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    };
    let found = get(gvk, &key).map_err(|error| ReadError::Invalid(format!("{error:?}")))?;
    found
        .map(|text| serde_json::from_str(&text).map_err(|error| ReadError::Invalid(error.to_string())))
        .transpose()
}

pub(crate) fn api_list(gvk: &Gvk, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<Value>, ReadError> {
    let found = list(gvk, namespace, selector, 0).map_err(|error| ReadError::Invalid(format!("{error:?}")))?;
    found
        .objects
        .iter()
        .map(|text| serde_json::from_str(text).map_err(|error| ReadError::Invalid(error.to_string())))
        .collect()
}
