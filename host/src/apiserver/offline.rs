//! A cluster with no API server behind it: each write that passes the
//! writer's checks is answered as a server would plausibly answer it, and
//! nothing is sent. `kinformer replay` hands its plugin such a cluster.
//!
//! The answer starts from the object as the given caches hold it (or, when
//! they do not, from an object with only the target's identity), applies the
//! write (a create or update is the object sent; an apply and a merge patch
//! are merged in; a JSON patch is applied, and one that does not apply is
//! `invalid`), and stamps it with the target's name and namespace, a uid when
//! it has none, and a new resourceVersion. A `scale` subresource answers a
//! Scale. The caches are not changed: the next answer about the same object
//! starts again from what they hold.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::WriteError;
use super::reader::{Read, ReadRequest};
use super::request::{Body, ObjectRef, Prepared};
use crate::caches::Caches;
use crate::grant::Verb;
use crate::selector::Selector;

/// Answers writes from a set of caches, never sending them; see the module
/// docs.
#[derive(Debug)]
pub struct Offline {
    caches: Caches,
    last_version: AtomicU64,
}

impl Offline {
    /// Answers from the objects in `caches`, as they are when each write is
    /// asked for, numbering the resourceVersions it assigns after
    /// `last_version` (the highest the objects have, so that the answers are
    /// newer than anything cached).
    #[must_use]
    pub fn new(caches: Caches, last_version: u64) -> Self {
        Self {
            caches,
            last_version: AtomicU64::new(last_version),
        }
    }

    /// The object as the server would store it (`None` for a delete).
    pub(super) fn answer(&self, prepared: &Prepared) -> Result<Option<String>, WriteError> {
        let version = self.last_version.fetch_add(1, Ordering::Relaxed) + 1;
        let target = &prepared.target;
        let mut answer = match (&prepared.body, prepared.verb) {
            (Body::Delete(_), _) => return Ok(None),
            (Body::Object(object), Verb::Apply) => {
                let mut stored = self.stored(target);
                json_patch::merge(&mut stored, object);
                stored
            }
            (Body::Object(object), _) => object.clone(),
            (Body::Merge(patch), _) => {
                let mut stored = self.stored(target);
                json_patch::merge(&mut stored, patch);
                stored
            }
            (Body::Json(patch), _) => {
                let mut stored = self.stored(target);
                json_patch::patch(&mut stored, patch)
                    .map_err(|error| WriteError::Invalid(format!("the JSON patch does not apply: {error}")))?;
                stored
            }
        };
        stamp(&mut answer, target, version);
        Ok(Some(answer.to_string()))
    }

    /// What the target is before the write: the cached object (or its Scale),
    /// or only its identity when nothing is cached.
    /// An uncached read, answered from the caches as a server holding just
    /// those objects would answer it.
    pub(super) fn read(&self, request: &ReadRequest) -> Result<Option<String>, WriteError> {
        let Some(cache) = self.caches.get(&request.gvk) else {
            return Err(WriteError::Unavailable(format!(
                "{}/{} was not recorded: offline, only recorded resources can be read",
                request.gvk.api_version(),
                request.gvk.kind
            )));
        };
        let cache = Some(cache);
        match &request.what {
            Read::Get(name) => {
                let key = match &request.namespace {
                    Some(namespace) => format!("{namespace}/{name}"),
                    None => name.clone(),
                };
                Ok(cache
                    .and_then(|cache| cache.get(&key))
                    .map(|object| object.json().to_owned()))
            }
            Read::List { label_selector, limit } => {
                let selector = match label_selector {
                    Some(text) => Selector::parse(text).map_err(|error| WriteError::Invalid(error.to_string()))?,
                    None => Selector::default(),
                };
                let limit = if *limit == 0 { usize::MAX } else { *limit as usize };
                let items: Vec<Value> = cache
                    .map(|cache| cache.list(request.namespace.as_deref(), &selector, limit).objects)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|object| serde_json::from_str(object.json()).ok())
                    .collect();
                let list = json!({
                    "apiVersion": request.gvk.api_version(),
                    "kind": format!("{}List", request.gvk.kind),
                    "metadata": {},
                    "items": items,
                });
                Ok(Some(list.to_string()))
            }
        }
    }

    fn stored(&self, target: &ObjectRef) -> Value {
        let cached = self
            .caches
            .get(&target.gvk)
            .and_then(|cache| cache.get(&target.key()))
            .and_then(|object| serde_json::from_str::<Value>(object.json()).ok());
        let object = cached.unwrap_or_else(|| {
            json!({
                "apiVersion": target.gvk.api_version(),
                "kind": target.gvk.kind,
                "metadata": {},
            })
        });
        match target.subresource.as_deref() {
            Some("scale") => json!({
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": object["metadata"],
                "spec": {"replicas": object["spec"]["replicas"].as_i64().unwrap_or(0)},
                "status": {"replicas": object["status"]["replicas"].as_i64().unwrap_or(0)},
            }),
            _ => object,
        }
    }
}

/// Gives the answer the target's name (a generated one for `generateName`)
/// and namespace, a uid when it has none, and resourceVersion `version`.
fn stamp(answer: &mut Value, target: &ObjectRef, version: u64) {
    let Value::Object(fields) = answer else { return };
    let metadata = fields.entry("metadata").or_insert_with(|| json!({}));
    let Value::Object(metadata) = metadata else { return };
    let name = match target.name.strip_suffix('*') {
        Some(prefix) => format!("{prefix}{}", generated_suffix(version)),
        None => target.name.clone(),
    };
    metadata.insert("name".into(), Value::String(name));
    if let Some(namespace) = &target.namespace {
        metadata.insert("namespace".into(), Value::String(namespace.clone()));
    }
    metadata.remove("generateName");
    if !metadata.get("uid").is_some_and(Value::is_string) {
        metadata.insert(
            "uid".into(),
            Value::String(format!("00000000-0000-4000-8000-{version:012x}")),
        );
    }
    metadata.insert("resourceVersion".into(), Value::String(version.to_string()));
}

/// Five characters the server would append to a `generateName`, here from
/// the resourceVersion, so that each is different.
fn generated_suffix(version: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut left = version;
    (0..5)
        .map(|_| {
            let letter = ALPHABET[(left % ALPHABET.len() as u64) as usize];
            left /= ALPHABET.len() as u64;
            char::from(letter)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube::api::GroupVersionKind;

    use super::*;
    use crate::apiserver::request::{PatchType, WriteRequest};
    use crate::indexer::indexer;
    use crate::object::CachedObject;

    fn deployments() -> GroupVersionKind {
        GroupVersionKind::gvk("apps", "v1", "Deployment")
    }

    /// An offline cluster whose deployment cache holds `shop/web` (3 replicas, rv 7).
    fn offline() -> Offline {
        let caches = Caches::new();
        let (reader, writer) = indexer();
        let web = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-web", "resourceVersion": "7"},
            "spec": {"replicas": 3}, "status": {"replicas": 3}
        });
        writer.apply(Arc::new(CachedObject::from_value(&web).unwrap()));
        caches.insert(deployments(), reader);
        Offline::new(caches, 7)
    }

    fn answer(offline: &Offline, request: WriteRequest) -> Result<Value, WriteError> {
        let answer = offline.answer(&request.prepare().unwrap())?;
        Ok(serde_json::from_str(&answer.unwrap()).unwrap())
    }

    fn web() -> ObjectRef {
        ObjectRef::new(deployments(), Some("shop"), "web")
    }

    fn patch(target: ObjectRef, patch_type: PatchType, patch: Value) -> WriteRequest {
        WriteRequest::Patch {
            target,
            patch_type,
            patch: patch.to_string(),
        }
    }

    #[test]
    fn a_patch_is_applied_to_the_cached_object_and_given_a_new_resource_version() {
        let offline = offline();
        let merged = answer(
            &offline,
            patch(web(), PatchType::Merge, json!({"spec": {"paused": true}})),
        )
        .unwrap();
        assert_eq!(merged["spec"], json!({"replicas": 3, "paused": true}));
        assert_eq!(merged["metadata"]["uid"], "u-web");
        assert_eq!(merged["metadata"]["resourceVersion"], "8");
        let replaced = json!([{"op": "replace", "path": "/spec/replicas", "value": 5}]);
        let patched = answer(&offline, patch(web(), PatchType::Json, replaced)).unwrap();
        assert_eq!(
            patched["spec"],
            json!({"replicas": 5}),
            "each answer starts from the cache"
        );
        assert_eq!(patched["metadata"]["resourceVersion"], "9");
        let failing = json!([{"op": "test", "path": "/spec/replicas", "value": 4}]);
        assert!(matches!(
            answer(&offline, patch(web(), PatchType::Json, failing)),
            Err(WriteError::Invalid(_))
        ));
    }

    #[test]
    fn a_scale_patch_answers_a_scale() {
        let scale = answer(
            &offline(),
            patch(
                web().subresource("scale"),
                PatchType::Merge,
                json!({"spec": {"replicas": 6}}),
            ),
        )
        .unwrap();
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["spec"]["replicas"], 6);
        assert_eq!(scale["status"]["replicas"], 3);
        assert_eq!(scale["metadata"]["name"], "web");
    }

    #[test]
    fn a_created_object_is_echoed_with_its_name_generated_and_an_uncached_one_gets_an_identity() {
        let offline = offline();
        let config_maps = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let create = |object: Value| WriteRequest::Create {
            gvk: config_maps.clone(),
            namespace: Some("shop".into()),
            object: object.to_string(),
        };
        let created = answer(
            &offline,
            create(json!({"metadata": {"generateName": "web-"}, "data": {"a": "1"}})),
        )
        .unwrap();
        let name = created["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        assert_eq!(created["metadata"]["namespace"], "shop");
        assert_eq!(created["data"]["a"], "1");
        assert!(created["metadata"]["uid"].is_string());
        let other = answer(&offline, create(json!({"metadata": {"generateName": "web-"}}))).unwrap();
        assert_ne!(other["metadata"]["name"], created["metadata"]["name"]);

        let unknown = ObjectRef::new(config_maps.clone(), Some("shop"), "settings");
        let patched = answer(&offline, patch(unknown, PatchType::Merge, json!({"data": {"b": "2"}}))).unwrap();
        assert_eq!(patched["kind"], "ConfigMap");
        assert_eq!(patched["metadata"]["name"], "settings");
        assert_eq!(patched["data"]["b"], "2");
        let deleted = WriteRequest::Delete {
            target: web(),
            options: crate::apiserver::DeleteOptions::default(),
        };
        assert_eq!(offline.answer(&deleted.prepare().unwrap()), Ok(None));
    }
}
