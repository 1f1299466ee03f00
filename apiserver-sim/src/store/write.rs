//! The write verbs that make and change objects: create, update, patch and apply.
//!
//! They follow the API server's rules for server-set metadata, optimistic
//! concurrency, generations, finalizing a deleted object and the `status`
//! subresource, and take
//! [`WriteOptions`]: a dry run persists nothing, and a field manager is recorded
//! in `metadata.managedFields` (see `managed_fields`, which also does
//! server-side apply).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::meta::{check_name, new_uid, now_rfc3339, random_suffix};
use super::{
    EventType, ResourceId, State, Store, StoredObject, Transaction, collection, crd, defaulting, existing, field_path,
    lookup, managed_fields, object_key, schema,
};
use crate::resources::ResourceDef;
use crate::status::{ApiError, Result};

/// How a patch body is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 JSON patch.
    Json,
    /// RFC 7386 JSON merge patch.
    Merge,
    /// Strategic merge patch: lists with a merge key merge element by element.
    Strategic,
    /// Server-side apply: merged as a merge patch, creating the object when it
    /// is missing, with the field ownership rules of `managed_fields`.
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type`.
    ///
    /// # Errors
    ///
    /// 415 for any other media type.
    pub fn from_content_type(content_type: &str) -> Result<Self> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// The options of a write, as its query parameters (and a delete's body) carry them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// `dryRun=All`: the write is checked and answered as it would be made, and
    /// nothing is stored, logged or watched.
    pub dry_run: bool,
    /// `fieldManager`: who writes. An apply needs one; any other write with one
    /// is recorded in `metadata.managedFields` as an `Update` of the fields it
    /// changed.
    pub field_manager: Option<String>,
    /// `force`: an apply takes the fields it conflicts on from their managers.
    pub force: bool,
    /// `fieldValidation=Strict` (what kubectl sends): a field that the
    /// object's type or custom resource schema does not declare is a 400
    /// instead of being dropped.
    pub strict: bool,
}

impl WriteOptions {
    /// Sets [`WriteOptions::dry_run`].
    #[must_use]
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Sets [`WriteOptions::field_manager`].
    #[must_use]
    pub fn field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = Some(manager.into());
        self
    }

    /// Sets [`WriteOptions::force`].
    #[must_use]
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Sets [`WriteOptions::strict`].
    #[must_use]
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }
}

/// Which part of an object a write addresses: the object, or a subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The object; its status stays as it is when the status subresource is served.
    Main,
    /// The `status` subresource: only the status changes.
    Status,
    /// The `scale` subresource: only the desired replicas change.
    Scale,
    /// The `approval` subresource of a CertificateSigningRequest: only
    /// `status.conditions` (`Approved`, `Denied`) change.
    Approval,
    /// The `ephemeralcontainers` subresource of a Pod: only
    /// `spec.ephemeralContainers` changes.
    EphemeralContainers,
}

impl Part {
    /// The subresource's name, as paths and `managedFields` entries name it.
    #[must_use]
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Self::Main => None,
            Self::Status => Some("status"),
            Self::Scale => Some("scale"),
            Self::Approval => Some("approval"),
            Self::EphemeralContainers => Some("ephemeralcontainers"),
        }
    }

    /// The fields of an object that a write to this part replaces, as paths
    /// of object keys; empty for the object itself and `scale`.
    pub(super) fn fields(self) -> &'static [&'static str] {
        match self {
            Self::Main | Self::Scale => &[],
            Self::Status => &["status"],
            Self::Approval => &["status", "conditions"],
            Self::EphemeralContainers => &["spec", "ephemeralContainers"],
        }
    }

    fn of_status(status: bool) -> Self {
        if status { Self::Status } else { Self::Main }
    }
}

/// Who owns the fields of a written object.
#[derive(Debug)]
pub(super) enum Ownership {
    /// The write's field manager, if it names one, takes the fields it changes.
    Record,
    /// Server-side apply worked the ownership out: these `managedFields`.
    Applied(Option<Value>),
}

/// The keys, besides `metadata`, that do not count as a spec change.
const NOT_SPEC: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];

impl Store {
    /// Creates an object.
    ///
    /// # Errors
    ///
    /// 409 when it exists, 422 when invalid, 404 when its namespace does not
    /// exist, 400 when its kind or namespace contradicts the path.
    pub fn create(&self, id: &ResourceId, namespace: Option<&str>, body: Value) -> Result<Arc<StoredObject>> {
        self.transaction(WriteOptions::default()).create(id, namespace, body)
    }

    /// Replaces an object (or, with `status`, only its status).
    ///
    /// # Errors
    ///
    /// 404 when it does not exist, 409 on a stale resourceVersion, 400 when the
    /// body names another object.
    pub fn update(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        self.transaction(WriteOptions::default())
            .update(id, namespace, name, body, status)
    }

    /// Applies a patch to an object (or, with `status`, to its status).
    ///
    /// # Errors
    ///
    /// As [`Store::update`], and 422 for a patch that does not apply.
    pub fn patch(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        self.transaction(WriteOptions::default())
            .patch(id, namespace, name, patch_type, patch, status)
    }
}

impl Transaction<'_> {
    /// Creates an object; see [`Store::create`].
    ///
    /// # Errors
    ///
    /// As [`Store::create`].
    pub fn create(&mut self, id: &ResourceId, namespace: Option<&str>, body: Value) -> Result<Arc<StoredObject>> {
        self.create_as(id, namespace, body, Ownership::Record)
    }

    pub(super) fn create_as(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        mut body: Value,
        ownership: Ownership,
    ) -> Result<Arc<StoredObject>> {
        let def = super::served_def(&self.state, id)?;
        check_type(&def, &body)?;
        defaulting::apply(&def, &mut body, None, &allocated(&self.state, &def));
        let metadata = metadata_mut(&mut body, &def)?;
        let namespace = resolve_namespace(&self.state, &def, namespace, metadata)?;
        let name = match metadata.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => match metadata.get("generateName").and_then(Value::as_str) {
                // As API servers since Kubernetes 1.32 do (RetryGenerateName),
                // a generated name that is taken is drawn again, a few times.
                Some(prefix) if !prefix.is_empty() => {
                    let objects = &collection(&self.state, id)?.objects;
                    let taken = |name: &str| objects.contains_key(&object_key(namespace.as_deref(), name));
                    let mut name = format!("{prefix}{}", random_suffix());
                    for _ in 0..7 {
                        if !taken(&name) {
                            break;
                        }
                        name = format!("{prefix}{}", random_suffix());
                    }
                    name
                }
                _ => {
                    return Err(ApiError::invalid(
                        &def.group,
                        &def.kind,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        check_name(&def, &name)?;
        let key = object_key(namespace.as_deref(), &name);
        if collection(&self.state, id)?.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        metadata.insert("name".into(), json!(name));
        match &namespace {
            Some(namespace) => metadata.insert("namespace".into(), json!(namespace)),
            None => metadata.remove("namespace"),
        };
        metadata.insert("uid".into(), json!(new_uid()));
        metadata.insert("creationTimestamp".into(), json!(now_rfc3339()));
        if def.tracks_generation {
            metadata.insert("generation".into(), json!(1));
        } else {
            metadata.remove("generation");
        }
        metadata.remove("deletionTimestamp");
        metadata.remove("deletionGracePeriodSeconds");
        defaulting::prepare_for_create(&def, &mut body);
        if def.status_subresource {
            // As the API server does: status is written through the subresource only.
            body.as_object_mut().expect("checked to be an object").remove("status");
        }
        if def.group.is_empty() && def.kind == "Namespace" {
            // kube-apiserver's namespace strategy starts every namespace
            // `Active`, the phase `kubectl get namespaces` prints.
            body["status"] = json!({"phase": "Active"});
        }
        if def.group.is_empty() && def.kind == "Service" {
            // Go writes a Service's empty load balancer status.
            body["status"] = json!({"loadBalancer": {}});
        }
        if def.group.is_empty() && def.kind == "Pod" {
            // The pod strategy: `Pending`, with the pod's QoS class.
            body["status"] = json!({"phase": "Pending", "qosClass": qos_class(&body["spec"])});
        }
        if def.kind == "CustomResourceDefinition" {
            crd::establish(&mut body);
        }
        super::drop_empty_metadata(&mut body);
        self.admit(&def, &name, &mut body, None)?;
        match ownership {
            Ownership::Record => {
                if let Some(manager) = self.options.field_manager.clone() {
                    managed_fields::record_update(&def, None, &mut body, &manager, Part::Main);
                }
            }
            Ownership::Applied(fields) => set_managed_fields(&mut body, fields),
        }
        let object = self.commit(id, EventType::Added, body, None);
        if def.kind == "CustomResourceDefinition" && !self.options.dry_run {
            crd::register(&mut self.state, &object.value);
        }
        Ok(object)
    }

    /// Replaces an object or its status; see [`Store::update`].
    ///
    /// # Errors
    ///
    /// As [`Store::update`].
    pub fn update(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        self.update_part(id, namespace, name, body, Part::of_status(status))
    }

    /// Replaces a part of an object: the object, or what a subresource writes.
    ///
    /// # Errors
    ///
    /// As [`Store::update`], and 404 for a subresource the resource does not serve.
    pub fn update_part(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        part: Part,
    ) -> Result<Arc<StoredObject>> {
        self.write(id, namespace, name, body, part, Ownership::Record)
    }

    /// Patches an object or its status; see [`Store::patch`]. An apply patch
    /// creates the object when it is missing, and needs a field manager.
    ///
    /// # Errors
    ///
    /// As [`Store::patch`]; for an apply also 409 when it conflicts with another
    /// manager's fields (unless forced), and 422 without a field manager.
    pub fn patch(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        self.patch_part(id, namespace, name, patch_type, patch, Part::of_status(status))
    }

    /// Patches a part of an object: the object, or what a subresource writes.
    ///
    /// # Errors
    ///
    /// As [`Transaction::patch`], and 404 for a subresource the resource does
    /// not serve.
    pub fn patch_part(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: Value,
        part: Part,
    ) -> Result<Arc<StoredObject>> {
        if patch_type == PatchType::Apply {
            return self.apply(id, namespace, name, patch, part);
        }
        let (def, existing) = existing(&self.state, id, namespace, name)?;
        let patched = patch_value(&def, name, &existing.value, patch_type, patch)?;
        self.write(id, namespace, name, patched, part, Ownership::Record)
    }

    /// Server-side apply of `applied` to a part of the object.
    pub(super) fn apply(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        applied: Value,
        part: Part,
    ) -> Result<Arc<StoredObject>> {
        let manager = self.options.field_manager.clone().ok_or_else(|| {
            ApiError::invalid_options(
                "PatchOptions",
                "fieldManager: Required value: is required for apply patch",
            )
        })?;
        if !applied.is_object() {
            return Err(ApiError::bad_request("the applied configuration is not an object"));
        }
        if applied["metadata"].get("managedFields").is_some() {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        let (def, live) = lookup(&self.state, id, namespace, name)?;
        let force = self.options.force;
        match live {
            Some(live) => {
                let (next, fields) = managed_fields::apply(&def, Some(&live.value), &applied, &manager, part, force)?;
                self.write(id, namespace, name, next, part, Ownership::Applied(fields))
            }
            None if part == Part::Main => {
                let (mut body, fields) = managed_fields::apply(&def, None, &applied, &manager, part, force)?;
                body["metadata"]["name"] = json!(name);
                self.create_as(id, namespace, body, Ownership::Applied(fields))
            }
            None => Err(ApiError::not_found(&def.group, &def.plural, name)),
        }
    }

    /// Writes the next state of an existing object, or of a part of it.
    pub(super) fn write(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        mut body: Value,
        part: Part,
        ownership: Ownership,
    ) -> Result<Arc<StoredObject>> {
        let (def, existing) = existing(&self.state, id, namespace, name)?;
        if let Some(subresource) = part.subresource()
            && !def.serves_subresource(subresource)
        {
            return Err(ApiError::no_route(&format!("{}/{subresource}", def.plural)));
        }
        check_type(&def, &body)?;
        // The whole object is defaulted, as kube-apiserver decodes it, but
        // for a status write (its new status is all that is kept).
        if matches!(part, Part::Main | Part::Scale | Part::EphemeralContainers) {
            defaulting::apply(&def, &mut body, Some(&existing.value), &allocated(&self.state, &def));
        }
        let metadata = metadata_mut(&mut body, &def)?;
        if metadata.get("name").and_then(Value::as_str).is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                metadata["name"].as_str().unwrap_or_default()
            )));
        }
        if let Some(rv) = metadata
            .get("resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
            && rv != existing.resource_version.to_string()
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }

        let fields = part.fields();
        let mut next = if fields.is_empty() {
            if def.status_subresource {
                match existing.value.get("status") {
                    Some(status) => body["status"] = status.clone(),
                    None => {
                        body.as_object_mut().expect("checked to be an object").remove("status");
                    }
                }
            }
            // Only their subresources write these.
            for (kind, fields) in [
                ("CertificateSigningRequest", Part::Approval.fields()),
                ("Pod", Part::EphemeralContainers.fields()),
            ] {
                if def.kind == kind {
                    let path: Vec<String> = fields.iter().map(|field| (*field).to_owned()).collect();
                    match field_path::get(&existing.value, &path) {
                        Some(kept) => field_path::set(&mut body, &path, kept.clone()),
                        None => field_path::remove(&mut body, &path),
                    }
                }
            }
            body
        } else {
            let path: Vec<String> = fields.iter().map(|field| (*field).to_owned()).collect();
            let mut next = existing.value.clone();
            match field_path::get(&body, &path) {
                Some(written) => field_path::set(&mut next, &path, written.clone()),
                None => field_path::remove(&mut next, &path),
            }
            next
        };
        let old_meta = existing.value["metadata"].as_object().cloned().unwrap_or_default();
        let spec_changed = part != Part::Status && spec_of(&next) != spec_of(&existing.value);
        let meta = next["metadata"].as_object_mut().expect("checked to be an object");
        for field in [
            "uid",
            "creationTimestamp",
            "namespace",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match old_meta.get(field) {
                Some(value) => meta.insert(field.into(), value.clone()),
                None => meta.remove(field),
            };
        }
        meta.insert("name".into(), json!(name));
        if def.tracks_generation {
            let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
            meta.insert("generation".into(), json!(generation + i64::from(spec_changed)));
        } else {
            meta.remove("generation");
        }
        meta.insert("resourceVersion".into(), json!(existing.resource_version.to_string()));
        let record = matches!(ownership, Ownership::Record);
        match ownership {
            Ownership::Applied(fields) => set_managed_fields(&mut next, fields),
            Ownership::Record => {
                // A body without managedFields keeps them; an empty list clears them.
                if !meta.contains_key("managedFields")
                    && let Some(fields) = old_meta.get("managedFields")
                {
                    meta.insert("managedFields".into(), fields.clone());
                }
            }
        }
        super::drop_empty_metadata(&mut next);
        self.admit(&def, name, &mut next, Some(&existing.value))?;
        if next == existing.value {
            // Nothing changed: no new resourceVersion, no event.
            return Ok(existing);
        }
        if record && let Some(manager) = self.options.field_manager.clone() {
            managed_fields::record_update(&def, Some(&existing.value), &mut next, &manager, part);
        }
        let meta = &next["metadata"];
        let finalized = meta.get("deletionTimestamp").is_some()
            && meta
                .get("finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        let event_type = if finalized {
            EventType::Deleted
        } else {
            EventType::Modified
        };
        Ok(self.commit(id, event_type, next, Some(existing)))
    }
}

impl Transaction<'_> {
    /// Prunes, defaults and checks an object of a resource with a schema, as
    /// kube-apiserver does a custom resource's; prunes a built-in object to
    /// its type's fields, as kube-apiserver's decoding does.
    ///
    /// # Errors
    ///
    /// 400 for a field the schema or type does not declare under strict
    /// field validation, 422 for invalid fields.
    fn admit(&self, def: &ResourceDef, name: &str, object: &mut Value, old: Option<&Value>) -> Result<()> {
        let Some(schema) = &def.schema else {
            if def.custom {
                return Ok(());
            }
            let pruned = crate::schemas::prune(&def.group, &def.version, &def.kind, object);
            return self.refuse_unknown(&pruned);
        };
        let (pruned, errors) = schema::admit(schema, object, old);
        self.refuse_unknown(&pruned)?;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_fields(&def.group, &def.kind, name, errors))
        }
    }
}

impl Transaction<'_> {
    /// Under strict field validation, the fields pruned are a 400.
    fn refuse_unknown(&self, pruned: &[String]) -> Result<()> {
        if !self.options.strict || pruned.is_empty() {
            return Ok(());
        }
        let unknown: Vec<String> = pruned.iter().map(|path| format!("unknown field {path:?}")).collect();
        Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            unknown.join(", ")
        )))
    }
}

/// `value` with a JSON, merge or strategic merge patch applied (the last only
/// to built-in types, as kube-apiserver refuses it for custom resources).
pub(super) fn patch_value(
    def: &ResourceDef,
    name: &str,
    value: &Value,
    patch_type: PatchType,
    patch: Value,
) -> Result<Value> {
    let mut patched = value.clone();
    match patch_type {
        PatchType::Json => {
            let operations: json_patch::Patch = serde_json::from_value(patch)
                .map_err(|error| ApiError::bad_request(format!("invalid JSON patch: {error}")))?;
            json_patch::patch(&mut patched, &operations)
                .map_err(|error| ApiError::invalid(&def.group, &def.kind, name, &error.to_string()))?;
        }
        PatchType::Strategic if def.custom => return Err(ApiError::strategic_patch_of_custom_resource()),
        PatchType::Strategic => patched = super::strategic::apply(value, &patch)?,
        PatchType::Merge | PatchType::Apply => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            json_patch::merge(&mut patched, &patch);
        }
    }
    Ok(patched)
}

/// A pod's quality of service class, as the kubelet and the API server work
/// it out from its containers' resources: `Guaranteed` when every container
/// limits CPU and memory and requests what it limits (or nothing), `BestEffort`
/// when none requests or limits anything, `Burstable` otherwise.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .filter_map(|list| spec[*list].as_array())
        .flatten()
        .collect();
    let named = |resources: &Value| {
        resources
            .as_object()
            .is_some_and(|resources| resources.keys().any(|name| name == "cpu" || name == "memory"))
    };
    if containers
        .iter()
        .all(|c| !named(&c["resources"]["requests"]) && !named(&c["resources"]["limits"]))
    {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let (requests, limits) = (&c["resources"]["requests"], &c["resources"]["limits"]);
        ["cpu", "memory"]
            .iter()
            .all(|name| limits[*name].is_string() && (requests[*name].is_null() || requests[*name] == limits[*name]))
    });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}

/// What the Services hold, for a Service's allocation; nothing for other kinds.
fn allocated(state: &State, def: &ResourceDef) -> defaulting::Allocated {
    let mut allocated = defaulting::Allocated::default();
    if !(def.group.is_empty() && def.kind == "Service") {
        return allocated;
    }
    let Ok(services) = collection(state, &ResourceId::new("", "v1", "services")) else {
        return allocated;
    };
    for service in services.objects.values() {
        let spec = &service.value["spec"];
        if let Some(ip) = spec["clusterIP"].as_str().and_then(|ip| ip.parse().ok()) {
            allocated.cluster_ips.insert(ip);
        }
        for port in spec["ports"].as_array().into_iter().flatten() {
            if let Some(node_port) = port["nodePort"].as_u64() {
                allocated.node_ports.insert(node_port);
            }
        }
    }
    allocated
}

fn set_managed_fields(object: &mut Value, fields: Option<Value>) {
    let Some(metadata) = object["metadata"].as_object_mut() else {
        return;
    };
    match fields {
        Some(fields) => metadata.insert("managedFields".into(), fields),
        None => metadata.remove("managedFields"),
    };
}

fn spec_of(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(key, _)| !NOT_SPEC.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn check_type(def: &ResourceDef, body: &Value) -> Result<()> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::bad_request("the request body is not a JSON object"));
    };
    if let Some(api_version) = object.get("apiVersion").and_then(Value::as_str)
        && api_version != def.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            def.kind
        )));
    }
    Ok(())
}

/// The body's metadata, with `apiVersion` and `kind` filled in.
fn metadata_mut<'a>(body: &'a mut Value, def: &ResourceDef) -> Result<&'a mut Map<String, Value>> {
    let object = body
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the request body is not a JSON object"))?;
    object.insert("apiVersion".into(), json!(def.api_version()));
    object.insert("kind".into(), json!(def.kind));
    let metadata = object.entry("metadata").or_insert_with(|| json!({}));
    metadata
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata is not a JSON object"))
}

fn resolve_namespace(
    state: &State,
    def: &ResourceDef,
    from_path: Option<&str>,
    metadata: &Map<String, Value>,
) -> Result<Option<String>> {
    if !def.namespaced {
        return Ok(None);
    }
    let in_body = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty());
    let namespace = match (from_path, in_body) {
        (Some(path), Some(body)) if path != body => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (Some(namespace), _) | (None, Some(namespace)) => namespace,
        (None, None) => return Err(ApiError::bad_request("a namespaced object needs a namespace")),
    };
    let namespaces = ResourceId::new("", "v1", "namespaces");
    let Some(found) = collection(state, &namespaces)?.objects.get(namespace) else {
        return Err(ApiError::not_found("", "namespaces", namespace));
    };
    if found.value["metadata"].get("deletionTimestamp").is_some() {
        let name = metadata.get("name").and_then(Value::as_str).unwrap_or_default();
        return Err(ApiError::namespace_terminating(
            &def.group,
            &def.plural,
            name,
            namespace,
        ));
    }
    Ok(Some(namespace.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::store::test_store as store;

    #[test]
    fn a_pods_qos_class_follows_its_containers_resources() {
        let spec = |resources: Value| json!({"containers": [{"name": "a", "resources": resources}]});
        assert_eq!(qos_class(&spec(json!({}))), "BestEffort");
        assert_eq!(qos_class(&spec(json!({"requests": {"cpu": "100m"}}))), "Burstable");
        let limited = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(qos_class(&spec(limited)), "Guaranteed");
        let unequal = json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(qos_class(&spec(unequal)), "Burstable");
    }

    #[test]
    fn json_patches_apply_and_a_failing_test_operation_is_invalid() {
        let (store, configmaps) = store();
        store
            .create(
                &configmaps,
                Some("a"),
                json!({"metadata": {"name": "cm"}, "data": {"k": "v"}}),
            )
            .unwrap();
        let patch =
            json!([{"op": "replace", "path": "/data/k", "value": "w"}, {"op": "add", "path": "/data/n", "value": "1"}]);
        let patched = store
            .patch(&configmaps, Some("a"), "cm", PatchType::Json, patch, false)
            .unwrap();
        assert_eq!(patched.value["data"], json!({"k": "w", "n": "1"}));
        let failing = json!([{"op": "test", "path": "/data/k", "value": "nope"}]);
        let error = store
            .patch(&configmaps, Some("a"), "cm", PatchType::Json, failing, false)
            .unwrap_err();
        assert_eq!(error.code, 422);
    }

    #[test]
    fn a_secrets_string_data_is_folded_into_its_data_and_not_stored() {
        let (store, _) = store();
        let secrets = ResourceId::new("", "v1", "secrets");
        let created = store
            .create(
                &secrets,
                Some("a"),
                json!({"metadata": {"name": "s"}, "data": {"kept": "eA==", "url": "b2xk"},
                       "stringData": {"url": "https://x"}}),
            )
            .unwrap();
        assert_eq!(created.value["data"], json!({"kept": "eA==", "url": "aHR0cHM6Ly94"}));
        assert!(created.value.get("stringData").is_none());
        let patched = store
            .patch(
                &secrets,
                Some("a"),
                "s",
                PatchType::Merge,
                json!({"stringData": {"token": "t"}}),
                false,
            )
            .unwrap();
        assert_eq!(patched.value["data"]["token"], "dA==");
        assert!(patched.value.get("stringData").is_none());
    }
}
