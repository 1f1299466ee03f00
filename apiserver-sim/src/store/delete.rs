//! Deletion: preconditions, finalizers that delay it, namespaces that take their contents, and deletecollection.

use std::sync::Arc;

use serde_json::json;

use super::meta::now_rfc3339;
use super::{EventType, Filter, ResourceId, Store, StoredObject, Transaction, WriteOptions, crd, existing};
use crate::status::{ApiError, Result};

/// `DeleteOptions.preconditions`.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// The object must have this uid.
    pub uid: Option<String>,
    /// The object must be at this resourceVersion.
    pub resource_version: Option<String>,
}

impl Store {
    /// Deletes an object, or marks it deleted while finalizers remain.
    ///
    /// # Errors
    ///
    /// 404 when it does not exist, 409 when a precondition fails.
    pub fn delete(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<Arc<StoredObject>> {
        self.transaction(WriteOptions::default())
            .delete(id, namespace, name, preconditions)
    }

    /// Deletes every object `filter` selects; returns them.
    ///
    /// # Errors
    ///
    /// 404 when the resource does not exist.
    pub fn delete_collection(&self, id: &ResourceId, filter: &Filter) -> Result<Vec<Arc<StoredObject>>> {
        self.transaction(WriteOptions::default()).delete_collection(id, filter)
    }
}

impl Transaction<'_> {
    /// Deletes an object; see [`Store::delete`].
    ///
    /// # Errors
    ///
    /// As [`Store::delete`].
    pub fn delete(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<Arc<StoredObject>> {
        let (def, existing) = existing(&self.state, id, namespace, name)?;
        let metadata = &existing.value["metadata"];
        if let Some(uid) = &preconditions.uid
            && metadata["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "Precondition failed: UID mismatch",
            ));
        }
        if let Some(rv) = &preconditions.resource_version
            && *rv != existing.resource_version.to_string()
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "Precondition failed: ResourceVersion mismatch",
            ));
        }
        if def.group.is_empty() && def.kind == "Namespace" {
            return Ok(self.terminate_namespace(id, name, existing));
        }
        let mut last = existing.value.clone();
        let has_finalizers = metadata["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if metadata.get("deletionTimestamp").is_some() {
                return Ok(existing);
            }
            last["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            return Ok(self.commit(id, EventType::Modified, last, Some(existing)));
        }
        if def.kind == "CustomResourceDefinition" && !self.options.dry_run {
            crd::unregister(&mut self.state, &existing.value);
        }
        Ok(self.commit(id, EventType::Deleted, last, Some(existing)))
    }

    /// A namespace's deletion, as kube-apiserver and the namespace controller
    /// make it: the namespace is marked `Terminating` (the answer), its
    /// contents are deleted, the `kubernetes` finalizer is taken off its
    /// spec, and it goes once no finalizer in its metadata keeps it. A
    /// watch sees each step.
    fn terminate_namespace(&mut self, id: &ResourceId, name: &str, existing: Arc<StoredObject>) -> Arc<StoredObject> {
        if existing.value["metadata"].get("deletionTimestamp").is_some() {
            return existing;
        }
        let mut terminating = existing.value.clone();
        terminating["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
        terminating["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        terminating["status"]["phase"] = json!("Terminating");
        let answer = self.commit(id, EventType::Modified, terminating, Some(existing));
        if self.options.dry_run {
            return answer;
        }
        let contained: Vec<(ResourceId, Arc<StoredObject>)> = self
            .state
            .collections
            .iter()
            .filter(|(_, c)| c.def.namespaced)
            .flat_map(|(id, c)| {
                c.objects
                    .values()
                    .filter(|o| o.namespace.as_deref() == Some(name))
                    .map(|o| (id.clone(), Arc::clone(o)))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (id, object) in contained {
            let mut forced = object.value.clone();
            forced["metadata"]["finalizers"] = json!([]);
            forced["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            self.commit(&id, EventType::Deleted, forced, Some(object));
        }
        let mut finalized = answer.value.clone();
        if let Some(spec) = finalized["spec"].as_object_mut() {
            spec.remove("finalizers");
        }
        let kept = answer.value["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|finalizers| !finalizers.is_empty());
        let event_type = if kept { EventType::Modified } else { EventType::Deleted };
        self.commit(id, event_type, finalized, Some(Arc::clone(&answer)));
        answer
    }

    /// Deletes every object `filter` selects; see [`Store::delete_collection`].
    ///
    /// # Errors
    ///
    /// As [`Store::delete_collection`].
    pub fn delete_collection(&mut self, id: &ResourceId, filter: &Filter) -> Result<Vec<Arc<StoredObject>>> {
        let selected = self.select(id, filter)?;
        let mut deleted = Vec::with_capacity(selected.len());
        for object in selected {
            deleted.push(self.delete(id, object.namespace.as_deref(), &object.name, &Preconditions::default())?);
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use kinformer_selector::Selector;
    use serde_json::json;

    use super::*;

    use crate::store::test_store as store;

    #[test]
    fn deletecollection_deletes_what_the_selector_selects() {
        let (store, configmaps) = store();
        for (name, app) in [("x", "web"), ("y", "web"), ("z", "db")] {
            store
                .create(
                    &configmaps,
                    Some("a"),
                    json!({"metadata": {"name": name, "labels": {"app": app}}}),
                )
                .unwrap();
        }
        let filter = Filter {
            labels: Selector::parse("app=web").unwrap(),
            ..Filter::default()
        };
        let deleted = store.delete_collection(&configmaps, &filter).unwrap();
        assert_eq!(deleted.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(store.count(&configmaps), 1);
    }
}
