//! Field ownership: which manager set which field, kept in `metadata.managedFields`, and server-side apply.
//!
//! Each entry names a manager, its operation (`Apply` or `Update`), the
//! subresource it wrote through, and the fields it owns as `FieldsV1`.
//!
//! - A write that names a `fieldManager` and is not an apply records an `Update`
//!   entry: the manager takes the fields it changed from every other manager;
//!   fields it removed are owned by nobody after it. A write without a field
//!   manager leaves ownership as it was (a real server would name one after the
//!   client's user agent).
//! - An apply makes the applied configuration the manager's `Apply` entry. A
//!   field it would change while another manager owns it is a conflict: 409,
//!   unless `force` gives the field to the applier. Setting a field to the value
//!   it has already shares it, without a conflict. A field the manager applied
//!   before and applies no more is removed from the object unless another
//!   manager owns it too.
//!
//! How far this goes: ownership is per field (a map owns none of its keys),
//! down to scalars, with every list
//! atomic (owned and replaced as a whole, as for a CRD's lists without
//! `x-kubernetes-list-type`); a real server merges lists such as `containers` by
//! key. The applied configuration is merged into the object as a JSON merge
//! patch. Conflicts are not reported against the applier's own `Update` entries,
//! and the `Status` of a conflict carries its message but no `causes`.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::field_path;
use super::meta::now_rfc3339;
use super::write::Part;
use crate::resources::ResourceDef;
use crate::status::{ApiError, Result};

const APPLY: &str = "Apply";
const UPDATE: &str = "Update";

/// The metadata the server sets: nobody owns it.
const SERVER_SET_METADATA: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

type Path = Vec<String>;

/// A set of owned fields, by path. A path owns everything under it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct FieldSet(BTreeSet<Path>);

impl FieldSet {
    /// The fields a value sets: every scalar, list and empty object in it.
    fn leaves(value: &Value) -> Self {
        fn collect(value: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
            match value {
                Value::Object(fields) if !fields.is_empty() => {
                    for (name, child) in fields {
                        path.push(name.clone());
                        collect(child, path, out);
                        path.pop();
                    }
                }
                _ if !path.is_empty() => {
                    out.insert(path.clone());
                }
                _ => {}
            }
        }
        let mut out = BTreeSet::new();
        collect(value, &mut Vec::new(), &mut out);
        Self(out)
    }

    /// Reads `fieldsV1`. List items (`k:`, `v:`, `i:`) own their list as a whole.
    fn from_fields_v1(fields: &Value) -> Self {
        fn collect(fields: &Map<String, Value>, path: &mut Path, out: &mut BTreeSet<Path>) {
            for (key, child) in fields {
                if let Some(name) = key.strip_prefix("f:") {
                    path.push(name.to_owned());
                    match child.as_object() {
                        Some(children) if !children.is_empty() => collect(children, path, out),
                        _ => {
                            out.insert(path.clone());
                        }
                    }
                    path.pop();
                } else if !path.is_empty() {
                    // `.` (the field itself) or a list item.
                    out.insert(path.clone());
                }
            }
        }
        let mut out = BTreeSet::new();
        if let Some(fields) = fields.as_object() {
            collect(fields, &mut Vec::new(), &mut out);
        }
        Self(out)
    }

    /// Writes `fieldsV1`: `{"f:spec": {"f:replicas": {}}}`, with `.` marking a
    /// field that is owned itself and has owned fields under it.
    fn to_fields_v1(&self) -> Value {
        let mut root = Value::Object(Map::new());
        for path in &self.0 {
            let keyed: Path = path.iter().map(|name| format!("f:{name}")).collect();
            if field_path::get(&root, &keyed).is_none() {
                field_path::set(&mut root, &keyed, json!({}));
            }
        }
        for path in &self.0 {
            let keyed: Path = path.iter().map(|name| format!("f:{name}")).collect();
            let mut node = &mut root;
            for key in &keyed {
                node = node.get_mut(key).expect("inserted above");
            }
            if let Some(children) = node.as_object_mut()
                && !children.is_empty()
            {
                children.insert(".".into(), json!({}));
            }
        }
        root
    }

    /// Whether the set owns `path` itself.
    fn contains(&self, path: &[String]) -> bool {
        self.0.iter().any(|owned| owned.as_slice() == path)
    }

    /// Whether the set owns `path` or a field under it.
    fn owns_under(&self, path: &[String]) -> bool {
        self.0.iter().any(|owned| owned.starts_with(path))
    }

    /// Gives up `path` and the fields under it; true when that changed the set.
    fn release(&mut self, path: &[String]) -> bool {
        let before = self.0.len();
        self.0.retain(|owned| !owned.starts_with(path));
        self.0.len() != before
    }
}

/// One `managedFields` entry.
#[derive(Debug)]
struct Entry {
    manager: String,
    operation: String,
    subresource: Option<String>,
    fields: FieldSet,
    /// The entry as stored, kept verbatim (its time included) while its fields
    /// do not change.
    stored: Option<Value>,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.as_deref() == subresource
    }

    fn release(&mut self, path: &[String]) {
        if self.fields.release(path) {
            self.stored = None;
        }
    }

    fn set_fields(&mut self, fields: FieldSet) {
        if self.fields != fields || self.stored.is_none() {
            self.fields = fields;
            self.stored = None;
        }
    }
}

/// An object's `managedFields`.
#[derive(Debug, Default)]
struct Entries(Vec<Entry>);

impl Entries {
    fn of(object: &Value) -> Self {
        let entries = object["metadata"]["managedFields"]
            .as_array()
            .map_or_else(Vec::new, |entries| {
                entries
                    .iter()
                    .map(|entry| Entry {
                        manager: entry["manager"].as_str().unwrap_or_default().to_owned(),
                        operation: entry["operation"].as_str().unwrap_or_default().to_owned(),
                        subresource: entry["subresource"].as_str().map(str::to_owned),
                        fields: FieldSet::from_fields_v1(&entry["fieldsV1"]),
                        stored: Some(entry.clone()),
                    })
                    .collect()
            });
        Self(entries)
    }

    fn find(&self, manager: &str, operation: &str, subresource: Option<&str>) -> Option<&Entry> {
        self.0.iter().find(|entry| entry.is(manager, operation, subresource))
    }

    fn entry(&mut self, manager: &str, operation: &str, subresource: Option<&str>) -> &mut Entry {
        let index = match self
            .0
            .iter()
            .position(|entry| entry.is(manager, operation, subresource))
        {
            Some(index) => index,
            None => {
                self.0.push(Entry {
                    manager: manager.to_owned(),
                    operation: operation.to_owned(),
                    subresource: subresource.map(str::to_owned),
                    fields: FieldSet::default(),
                    stored: None,
                });
                self.0.len() - 1
            }
        };
        &mut self.0[index]
    }

    /// The `managedFields` value: changed entries stamped now, entries left
    /// owning nothing dropped; `None` when no entry is left.
    fn to_value(&self, api_version: &str) -> Option<Value> {
        let entries: Vec<Value> = self
            .0
            .iter()
            .filter_map(|entry| {
                if let Some(stored) = &entry.stored {
                    return Some(stored.clone());
                }
                if entry.fields.0.is_empty() {
                    return None;
                }
                let mut value = json!({
                    "manager": entry.manager,
                    "operation": entry.operation,
                    "apiVersion": api_version,
                    "time": now_rfc3339(),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": entry.fields.to_fields_v1(),
                });
                if let Some(subresource) = &entry.subresource {
                    value["subresource"] = json!(subresource);
                }
                Some(value)
            })
            .collect();
        (!entries.is_empty()).then_some(Value::Array(entries))
    }

    fn store(&self, object: &mut Value, api_version: &str) {
        let value = self.to_value(api_version);
        let Some(metadata) = object["metadata"].as_object_mut() else {
            return;
        };
        match value {
            Some(value) => metadata.insert("managedFields".into(), value),
            None => metadata.remove("managedFields"),
        };
    }
}

/// The fields of `object` a write to `part` can own, at their paths in the object.
fn ownable(def: &ResourceDef, object: &Value, part: Part) -> Value {
    match part {
        Part::Main => {
            let mut ownable = object.clone();
            if let Some(fields) = ownable.as_object_mut() {
                fields.remove("apiVersion");
                fields.remove("kind");
                if def.status_subresource {
                    fields.remove("status");
                }
                if let Some(metadata) = fields.get_mut("metadata").and_then(Value::as_object_mut) {
                    for server_set in SERVER_SET_METADATA {
                        metadata.remove(server_set);
                    }
                }
                if fields
                    .get("metadata")
                    .and_then(Value::as_object)
                    .is_some_and(Map::is_empty)
                {
                    fields.remove("metadata");
                }
            }
            ownable
        }
        Part::Status | Part::Approval | Part::EphemeralContainers => {
            let path: Vec<String> = part.fields().iter().map(|field| (*field).to_owned()).collect();
            let mut ownable = json!({});
            if let Some(value) = field_path::get(object, &path) {
                field_path::set(&mut ownable, &path, value.clone());
            }
            ownable
        }
        Part::Scale => {
            let mut ownable = json!({});
            if let Some(paths) = &def.scale_subresource {
                let path = field_path::parse(&paths.spec_replicas);
                if let Some(replicas) = field_path::get(object, &path) {
                    field_path::set(&mut ownable, &path, replicas.clone());
                }
            }
            ownable
        }
    }
}

/// Records a non-apply write by `manager` to `part`: it takes the fields that
/// changed between `previous` (`None` for a creation) and `next`, and fields
/// that were removed are owned by nobody any more. `next` gets the updated
/// `managedFields`.
pub(super) fn record_update(def: &ResourceDef, previous: Option<&Value>, next: &mut Value, manager: &str, part: Part) {
    let before = previous.map_or_else(|| json!({}), |previous| ownable(def, previous, part));
    let after = ownable(def, next, part);
    let changed: Vec<Path> = FieldSet::leaves(&after)
        .0
        .into_iter()
        .filter(|path| field_path::get(&before, path) != field_path::get(&after, path))
        .collect();
    let removed: Vec<Path> = FieldSet::leaves(&before)
        .0
        .into_iter()
        .filter(|path| field_path::get(&after, path).is_none())
        .collect();
    if changed.is_empty() && removed.is_empty() {
        return;
    }
    let subresource = part.subresource();
    let mut entries = Entries::of(next);
    for path in &removed {
        entries.0.iter_mut().for_each(|entry| entry.release(path));
    }
    for path in &changed {
        entries
            .0
            .iter_mut()
            .filter(|entry| !entry.is(manager, UPDATE, subresource))
            .for_each(|entry| entry.release(path));
    }
    let entry = entries.entry(manager, UPDATE, subresource);
    let mut fields = entry.fields.clone();
    fields.0.extend(changed);
    entry.set_fields(fields);
    entries.store(next, &def.api_version());
}

/// Server-side apply of `applied` by `manager` to `part` of `live` (`None`: the
/// object does not exist yet). Answers the object to write and its
/// `managedFields`.
///
/// # Errors
///
/// 409 when the apply would change fields other managers own and is not forced.
pub(super) fn apply(
    def: &ResourceDef,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    part: Part,
    force: bool,
) -> Result<(Value, Option<Value>)> {
    let subresource = part.subresource();
    let applied_fields = ownable(def, applied, part);
    let applied_set = FieldSet::leaves(&applied_fields);
    let live_fields = live.map_or_else(|| json!({}), |live| ownable(def, live, part));
    let mut entries = live.map(Entries::of).unwrap_or_default();
    let mut next = live.cloned().unwrap_or_else(|| json!({}));
    let patch = match part {
        Part::Main => applied.clone(),
        Part::Status | Part::Scale | Part::Approval | Part::EphemeralContainers => applied_fields,
    };
    json_patch::merge(&mut next, &patch);
    let merged_fields = ownable(def, &next, part);

    // A conflict: a field the apply changes that another manager owns.
    let mut conflicts: Vec<(String, Path)> = Vec::new();
    for path in &applied_set.0 {
        if field_path::get(&live_fields, path) == field_path::get(&merged_fields, path) {
            continue;
        }
        for entry in entries.0.iter().filter(|entry| entry.manager != manager) {
            if entry.fields.contains(path) && !conflicts.contains(&(entry.manager.clone(), path.clone())) {
                conflicts.push((entry.manager.clone(), path.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict_error(&conflicts));
        }
        for (owner, path) in &conflicts {
            entries
                .0
                .iter_mut()
                .filter(|entry| entry.manager == *owner)
                .for_each(|entry| entry.release(path));
        }
    }

    let applied_before = entries
        .find(manager, APPLY, subresource)
        .map(|entry| entry.fields.clone())
        .unwrap_or_default();
    let released: Vec<Path> = applied_before
        .0
        .into_iter()
        .filter(|path| {
            !applied_set.contains(path)
                && !entries
                    .0
                    .iter()
                    .filter(|entry| !entry.is(manager, APPLY, subresource))
                    .any(|entry| entry.fields.owns_under(path))
        })
        .collect();
    for path in &released {
        field_path::remove(&mut next, path);
    }
    entries.entry(manager, APPLY, subresource).set_fields(applied_set);
    Ok((next, entries.to_value(&def.api_version())))
}

/// `Apply failed with 2 conflicts: conflict with "hpa": .spec.replicas\n...`, as
/// the API server words it.
fn conflict_error(conflicts: &[(String, Path)]) -> ApiError {
    let mut managers: Vec<(&str, Vec<String>)> = Vec::new();
    for (manager, path) in conflicts {
        let path = field_path::display(path);
        match managers.iter_mut().find(|(name, _)| name == manager) {
            Some((_, paths)) => paths.push(path),
            None => managers.push((manager, vec![path])),
        }
    }
    let count = conflicts.len();
    let described: Vec<String> = managers
        .iter()
        .map(|(manager, paths)| match paths.as_slice() {
            [path] => format!("conflict with {manager:?}: {path}"),
            paths => format!("conflicts with {manager:?}:\n- {}", paths.join("\n- ")),
        })
        .collect();
    let plural = if count == 1 { "" } else { "s" };
    ApiError::apply_conflict(format!(
        "Apply failed with {count} conflict{plural}: {}",
        described.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{ResourceDef, ScalePaths};

    fn deployments() -> ResourceDef {
        ResourceDef::new("apps", "v1", "Deployment", "deployments")
            .with_status()
            .with_scale(ScalePaths::replicas())
    }

    fn fields_of(object: &Value, manager: &str) -> Value {
        object["metadata"]["managedFields"]
            .as_array()
            .and_then(|entries| entries.iter().find(|entry| entry["manager"] == manager))
            .map(|entry| entry["fieldsV1"].clone())
            .unwrap_or(Value::Null)
    }

    #[test]
    fn fields_v1_round_trips_and_marks_owned_parents() {
        let set = FieldSet(BTreeSet::from([
            vec!["spec".into(), "replicas".into()],
            vec!["metadata".into(), "labels".into()],
            vec!["metadata".into(), "labels".into(), "app".into()],
        ]));
        let fields = set.to_fields_v1();
        assert_eq!(
            fields,
            json!({"f:spec": {"f:replicas": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
        );
        assert_eq!(FieldSet::from_fields_v1(&fields), set);
    }

    #[test]
    fn list_items_own_their_whole_list() {
        let fields = json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}});
        let set = FieldSet::from_fields_v1(&fields);
        assert_eq!(
            set.0,
            BTreeSet::from([vec!["spec".to_owned(), "containers".to_owned()]])
        );
    }

    #[test]
    fn an_update_takes_the_fields_it_changed_from_their_owner() {
        let def = deployments();
        let live = json!({"metadata": {"name": "web"}, "spec": {"replicas": 1, "paused": false}});
        let (applied, fields) = apply(&def, None, &live, "deployer", Part::Main, false).unwrap();
        let mut live = applied;
        live["metadata"]["managedFields"] = fields.unwrap();

        let mut next = live.clone();
        next["spec"]["replicas"] = json!(4);
        record_update(&def, Some(&live), &mut next, "hpa", Part::Scale);
        assert_eq!(fields_of(&next, "deployer"), json!({"f:spec": {"f:paused": {}}}));
        assert_eq!(fields_of(&next, "hpa"), json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(next["metadata"]["managedFields"][1]["subresource"], "scale");
    }

    #[test]
    fn an_apply_conflicts_on_changed_fields_of_other_managers_unless_forced() {
        let def = deployments();
        let config = json!({"metadata": {"name": "web"}, "spec": {"replicas": 1}});
        let (mut live, fields) = apply(&def, None, &config, "deployer", Part::Main, false).unwrap();
        live["metadata"]["managedFields"] = fields.unwrap();

        let same = json!({"spec": {"replicas": 1}});
        let (_, shared) = apply(&def, Some(&live), &same, "other", Part::Main, false).unwrap();
        assert_eq!(
            shared.unwrap().as_array().unwrap().len(),
            2,
            "same value: shared, no conflict"
        );

        let different = json!({"spec": {"replicas": 5}});
        let error = apply(&def, Some(&live), &different, "other", Part::Main, false).unwrap_err();
        assert_eq!(error.code, 409);
        assert_eq!(
            error.message,
            "Apply failed with 1 conflict: conflict with \"deployer\": .spec.replicas"
        );
        let (forced, fields) = apply(&def, Some(&live), &different, "other", Part::Main, true).unwrap();
        assert_eq!(forced["spec"]["replicas"], 5);
        let fields = fields.unwrap();
        assert_eq!(
            fields.as_array().unwrap().len(),
            1,
            "deployer owned nothing else: {fields}"
        );
        assert_eq!(fields[0]["manager"], "other");
    }

    #[test]
    fn a_field_no_longer_applied_is_removed_unless_someone_else_owns_it() {
        let def = deployments();
        let config = json!({"metadata": {"name": "web", "labels": {"a": "1", "b": "2"}}});
        let (mut live, fields) = apply(&def, None, &config, "deployer", Part::Main, false).unwrap();
        live["metadata"]["managedFields"] = fields.unwrap();
        let mut shared = live.clone();
        shared["metadata"]["labels"]["b"] = json!("3");
        record_update(&def, Some(&live), &mut shared, "editor", Part::Main);

        let other = json!({"metadata": {"name": "web", "labels": {"c": "3"}}});
        let (next, _) = apply(&def, Some(&shared), &other, "deployer", Part::Main, false).unwrap();
        assert_eq!(
            next["metadata"]["labels"],
            json!({"b": "3", "c": "3"}),
            "a is released, b is the editor's"
        );
    }

    #[test]
    fn reapplying_the_same_configuration_changes_nothing() {
        let def = deployments();
        let config = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2}});
        let (mut live, fields) = apply(&def, None, &config, "deployer", Part::Main, false).unwrap();
        live["metadata"]["managedFields"] = fields.clone().unwrap();
        let (again, again_fields) = apply(&def, Some(&live), &config, "deployer", Part::Main, false).unwrap();
        assert_eq!(again_fields, fields);
        assert_eq!(again["spec"], live["spec"]);
    }
}
