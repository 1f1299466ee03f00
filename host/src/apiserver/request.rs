//! What a plugin asks to write, validated and bounded before anything else
//! looks at it.

use kube::api::GroupVersionKind;
use serde_json::Value;

use super::WriteError;
use crate::grant::Verb;
use crate::limits::MAX_WRITE_BYTES;

/// The longest object name (a DNS subdomain's limit).
const MAX_NAME_LEN: usize = 253;
/// The longest namespace (a DNS label's limit).
const MAX_NAMESPACE_LEN: usize = 63;
/// The longest API group (a DNS subdomain); versions and kinds are shorter.
const MAX_GROUP_LEN: usize = 253;
/// The longest version, kind, uid or resourceVersion.
const MAX_TOKEN_LEN: usize = 128;
/// How much of a string an error message or an audit line repeats.
const SHOWN_LEN: usize = 80;

/// An object to write, or one of its subresources.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// Its resource type.
    pub gvk: GroupVersionKind,
    /// Its namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// `status` or `scale`; `None` for the object itself.
    pub subresource: Option<String>,
}

impl ObjectRef {
    /// The object `name` of type `gvk` in `namespace` (`None` when
    /// cluster-scoped).
    #[must_use]
    pub fn new(gvk: GroupVersionKind, namespace: Option<&str>, name: &str) -> Self {
        Self {
            gvk,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            subresource: None,
        }
    }

    /// Its subresource `subresource` (`status`, `scale`).
    #[must_use]
    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.to_owned());
        self
    }

    /// Its cache key: `namespace/name`, or `name`.
    #[must_use]
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{namespace}/{}", self.name),
            None => self.name.clone(),
        }
    }

    /// `apiVersion/Kind[/subresource]`, as write grants name resources.
    #[must_use]
    pub fn resource(&self) -> String {
        let resource = format!("{}/{}", self.gvk.api_version(), self.gvk.kind);
        match &self.subresource {
            Some(subresource) => format!("{resource}/{subresource}"),
            None => resource,
        }
    }

    /// Refuses a malformed type, namespace, name or subresource.
    pub(crate) fn check(&self) -> Result<(), WriteError> {
        check_gvk(&self.gvk)?;
        if let Some(namespace) = &self.namespace {
            check_namespace(namespace)?;
        }
        check_name("name", &self.name)?;
        match self.subresource.as_deref() {
            None | Some("status" | "scale") => Ok(()),
            Some(other) => Err(WriteError::Invalid(format!(
                "subresource {:?}: plugins write status and scale only",
                shown(other)
            ))),
        }
    }
}

/// How a patch is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
}

/// What a delete does to the object's dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// They are left without an owner.
    Orphan,
    /// They are deleted after the object, in the background.
    Background,
    /// The object waits for them to be deleted first.
    Foreground,
}

/// Conditions and policy of a delete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// Delete only while the object has this uid.
    pub uid: Option<String>,
    /// Delete only while the object is at this resourceVersion.
    pub resource_version: Option<String>,
    /// What happens to dependents; the server's default when `None`.
    pub propagation: Option<Propagation>,
}

/// An Event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something may need attention.
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`, as the Event's `type`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One write a plugin asks for, as it asked: JSON text, unchecked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRequest {
    /// Create `object` (with apiVersion, kind and metadata.name or
    /// generateName) in `namespace`.
    Create {
        /// Its type.
        gvk: GroupVersionKind,
        /// Its namespace; `None` for cluster-scoped objects.
        namespace: Option<String>,
        /// The object as JSON.
        object: String,
    },
    /// Replace an object or its subresource with `object`.
    Update {
        /// What is replaced.
        target: ObjectRef,
        /// The new state as JSON.
        object: String,
    },
    /// Patch an object or its subresource.
    Patch {
        /// What is patched.
        target: ObjectRef,
        /// Merge or JSON patch.
        patch_type: PatchType,
        /// The patch as JSON.
        patch: String,
    },
    /// Server-side apply of `object`, with the plugin's name as field manager.
    Apply {
        /// What is applied to.
        target: ObjectRef,
        /// The fields the plugin manages, as JSON.
        object: String,
        /// Take over fields other managers own.
        force: bool,
    },
    /// Delete an object.
    Delete {
        /// What is deleted.
        target: ObjectRef,
        /// Preconditions and propagation.
        options: DeleteOptions,
    },
}

/// A request that passed validation: its target and its parsed body.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) verb: Verb,
    /// The object written; for a create with `generateName`, the name is that
    /// prefix followed by `*`.
    pub(crate) target: ObjectRef,
    pub(crate) body: Body,
    /// For apply: take over fields other managers own.
    pub(crate) force: bool,
    /// The object or patch as the plugin wrote it, for the record (which
    /// keeps as much of it as its writer keeps).
    pub(crate) text: Option<String>,
}

/// What is sent.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// The object, for create, update and apply.
    Object(Value),
    /// A merge patch.
    Merge(Value),
    /// A JSON patch.
    Json(json_patch::Patch),
    /// A delete's options.
    Delete(DeleteOptions),
}

impl WriteRequest {
    /// What it does, as grants name it.
    #[must_use]
    pub fn verb(&self) -> Verb {
        match self {
            Self::Create { .. } => Verb::Create,
            Self::Update { .. } => Verb::Update,
            Self::Patch { .. } => Verb::Patch,
            Self::Apply { .. } => Verb::Apply,
            Self::Delete { .. } => Verb::Delete,
        }
    }

    /// The resource and key it is about, cut short for a log line: what an
    /// audit line says of a request that did not validate.
    pub(crate) fn shown_target(&self) -> (String, String) {
        match self {
            Self::Create { gvk, namespace, .. } => {
                let resource = format!("{}/{}", gvk.api_version(), gvk.kind);
                let key = namespace.as_ref().map_or_else(String::new, |ns| format!("{ns}/"));
                (shown(&resource).to_owned(), shown(&key).to_owned())
            }
            Self::Update { target, .. }
            | Self::Patch { target, .. }
            | Self::Apply { target, .. }
            | Self::Delete { target, .. } => (shown(&target.resource()).to_owned(), shown(&target.key()).to_owned()),
        }
    }

    /// Validates the request and parses its body.
    ///
    /// # Errors
    ///
    /// [`WriteError::TooLarge`] for an object or patch over [`MAX_WRITE_BYTES`],
    /// [`WriteError::Invalid`] for anything malformed: a name, namespace or
    /// type the API would not take, a subresource other than `status` and
    /// `scale` (or any on create and delete), a body that is not JSON of the
    /// right shape, or one whose apiVersion, kind, name or namespace disagree
    /// with the target.
    pub(crate) fn prepare(self) -> Result<Prepared, WriteError> {
        let verb = self.verb();
        let force = matches!(self, Self::Apply { force: true, .. });
        match self {
            Self::Create { gvk, namespace, object } => {
                check_gvk(&gvk)?;
                if let Some(namespace) = &namespace {
                    check_namespace(namespace)?;
                }
                let mut value = parse_object(&object)?;
                let target = ObjectRef {
                    gvk,
                    namespace,
                    name: created_name(&value)?,
                    subresource: None,
                };
                fill_object(&mut value, &target, false)?;
                Ok(Prepared {
                    verb,
                    target,
                    body: Body::Object(value),
                    force: false,
                    text: Some(object),
                })
            }
            Self::Update { target, object } | Self::Apply { target, object, .. } => {
                target.check()?;
                let mut value = parse_object(&object)?;
                fill_object(&mut value, &target, true)?;
                Ok(Prepared {
                    verb,
                    target,
                    body: Body::Object(value),
                    force,
                    text: Some(object),
                })
            }
            Self::Patch {
                target,
                patch_type,
                patch,
            } => {
                target.check()?;
                check_size("patch", &patch)?;
                let body = match patch_type {
                    PatchType::Merge => match serde_json::from_str::<Value>(&patch) {
                        Ok(value @ Value::Object(_)) => Body::Merge(value),
                        Ok(_) => return Err(WriteError::Invalid("a merge patch is a JSON object".into())),
                        Err(error) => return Err(WriteError::Invalid(format!("the patch is not JSON: {error}"))),
                    },
                    PatchType::Json => Body::Json(
                        serde_json::from_str(&patch)
                            .map_err(|error| WriteError::Invalid(format!("not a JSON patch: {error}")))?,
                    ),
                };
                Ok(Prepared {
                    verb,
                    target,
                    body,
                    force: false,
                    text: Some(patch),
                })
            }
            Self::Delete { target, options } => {
                target.check()?;
                if target.subresource.is_some() {
                    return Err(WriteError::Invalid("a subresource is not deleted on its own".into()));
                }
                for (what, value) in [("uid", &options.uid), ("resourceVersion", &options.resource_version)] {
                    if let Some(value) = value {
                        check_token(what, value)?;
                    }
                }
                Ok(Prepared {
                    verb,
                    target,
                    body: Body::Delete(options),
                    force: false,
                    text: None,
                })
            }
        }
    }
}

/// Refuses a group, version or kind the API would not have.
pub(crate) fn check_gvk(gvk: &GroupVersionKind) -> Result<(), WriteError> {
    let group_ok = gvk.group.len() <= MAX_GROUP_LEN
        && gvk
            .group
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    let version_ok = !gvk.version.is_empty()
        && gvk.version.len() <= MAX_TOKEN_LEN
        && gvk
            .version
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let kind_ok = gvk.kind.starts_with(|c: char| c.is_ascii_alphabetic())
        && gvk.kind.len() <= MAX_TOKEN_LEN
        && gvk.kind.chars().all(|c| c.is_ascii_alphanumeric());
    if group_ok && version_ok && kind_ok {
        Ok(())
    } else {
        Err(WriteError::Invalid(format!(
            "no such resource type: group {:?}, version {:?}, kind {:?}",
            shown(&gvk.group),
            shown(&gvk.version),
            shown(&gvk.kind)
        )))
    }
}

/// Refuses a namespace that is not a DNS label.
pub(crate) fn check_namespace(namespace: &str) -> Result<(), WriteError> {
    let ok = !namespace.is_empty()
        && namespace.len() <= MAX_NAMESPACE_LEN
        && namespace
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(WriteError::Invalid(format!(
            "namespace {:?} is malformed",
            shown(namespace)
        )))
    }
}

/// Refuses a name that could not be a path segment of the API (empty, `.`,
/// `..`, a `/`, `%`, `?`, `#`, whitespace, anything but printable ASCII).
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), WriteError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '@' | '~' | '+' | '='));
    if ok {
        Ok(())
    } else {
        Err(WriteError::Invalid(format!("{what} {:?} is malformed", shown(name))))
    }
}

/// Refuses an empty, overlong or non-printable uid or resourceVersion.
fn check_token(what: &str, value: &str) -> Result<(), WriteError> {
    if !value.is_empty() && value.len() <= MAX_TOKEN_LEN && value.chars().all(|c| c.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(WriteError::Invalid(format!("{what} {:?} is malformed", shown(value))))
    }
}

fn check_size(what: &str, text: &str) -> Result<(), WriteError> {
    if text.len() > MAX_WRITE_BYTES {
        Err(WriteError::TooLarge(format!(
            "the {what} is {} bytes, the limit is {MAX_WRITE_BYTES}",
            text.len()
        )))
    } else {
        Ok(())
    }
}

fn parse_object(text: &str) -> Result<Value, WriteError> {
    check_size("object", text)?;
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(WriteError::Invalid("the object is not a JSON object".into())),
        Err(error) => Err(WriteError::Invalid(format!("the object is not JSON: {error}"))),
    }
}

/// The name of an object to create: `metadata.name`, or `metadata.generateName`
/// followed by `*`.
fn created_name(object: &Value) -> Result<String, WriteError> {
    let metadata = &object["metadata"];
    if let Some(name) = metadata["name"].as_str() {
        check_name("metadata.name", name)?;
        return Ok(name.to_owned());
    }
    if let Some(prefix) = metadata["generateName"].as_str() {
        check_name("metadata.generateName", prefix)?;
        return Ok(format!("{prefix}*"));
    }
    Err(WriteError::Invalid(
        "the object has neither metadata.name nor metadata.generateName".into(),
    ))
}

/// Makes the object agree with its target: apiVersion, kind, and (`named`)
/// metadata.name are filled in when missing and must match when present, and
/// so must metadata.namespace. A `scale` body is a Scale of its own type.
fn fill_object(object: &mut Value, target: &ObjectRef, named: bool) -> Result<(), WriteError> {
    let Value::Object(fields) = object else {
        return Err(WriteError::Invalid("the object is not a JSON object".into()));
    };
    let mismatch = |field: &str, found: &Value, wanted: &str| {
        WriteError::Invalid(format!(
            "the object's {field} is {}, the target's is {wanted:?}",
            shown(&found.to_string())
        ))
    };
    if target.subresource.as_deref() != Some("scale") {
        for (field, wanted) in [
            ("apiVersion", target.gvk.api_version()),
            ("kind", target.gvk.kind.clone()),
        ] {
            match fields.get(field) {
                None => {
                    fields.insert(field.to_owned(), Value::String(wanted));
                }
                Some(Value::String(found)) if *found == wanted => {}
                Some(found) => return Err(mismatch(field, found, &wanted)),
            }
        }
    }
    let metadata = fields
        .entry("metadata")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Value::Object(metadata) = metadata else {
        return Err(WriteError::Invalid("the object's metadata is not a JSON object".into()));
    };
    if named {
        match metadata.get("name") {
            None => {
                metadata.insert("name".into(), Value::String(target.name.clone()));
            }
            Some(Value::String(found)) if *found == target.name => {}
            Some(found) => return Err(mismatch("metadata.name", found, &target.name)),
        }
    }
    match (metadata.get("namespace"), &target.namespace) {
        (None, _) => {}
        (Some(Value::String(found)), Some(wanted)) if found == wanted => {}
        (Some(found), wanted) => {
            return Err(mismatch("metadata.namespace", found, wanted.as_deref().unwrap_or("")));
        }
    }
    Ok(())
}

/// The first characters of `text`, for a message.
pub(crate) fn shown(text: &str) -> &str {
    cut(text, SHOWN_LEN)
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployments() -> GroupVersionKind {
        GroupVersionKind::gvk("apps", "v1", "Deployment")
    }

    fn web() -> ObjectRef {
        ObjectRef::new(deployments(), Some("shop"), "web")
    }

    fn invalid(request: WriteRequest) -> String {
        match request.prepare() {
            Err(WriteError::Invalid(message)) => message,
            other => panic!("not invalid: {other:?}"),
        }
    }

    fn patch(target: ObjectRef, patch: &str) -> WriteRequest {
        WriteRequest::Patch {
            target,
            patch_type: PatchType::Merge,
            patch: patch.into(),
        }
    }

    #[test]
    fn names_and_types_that_could_leave_their_path_are_invalid() {
        for name in [
            "",
            ".",
            "..",
            "a/b",
            "../../secrets/x",
            "a?dryRun=All",
            "a#b",
            "a b",
            "é",
            "%2F",
        ] {
            let mut target = web();
            target.name = name.into();
            invalid(patch(target, "{}"));
        }
        invalid(patch(web().subresource("eviction"), "{}"));
        let mut target = web();
        target.namespace = Some("Shop".into());
        invalid(patch(target, "{}"));
        for (group, version, kind) in [("apps/../v1", "v1", "Deployment"), ("", "", "Pod"), ("", "v1", "Pod/x")] {
            let target = ObjectRef::new(GroupVersionKind::gvk(group, version, kind), Some("a"), "b");
            invalid(patch(target, "{}"));
        }
        let mut huge = web();
        huge.name = "n".repeat(1 << 20);
        assert!(
            invalid(patch(huge, "{}")).len() < 200,
            "the message repeats a bounded part"
        );
        assert!(patch(web(), "{}").prepare().is_ok());
    }

    #[test]
    fn bodies_over_the_limit_are_too_large_and_malformed_ones_invalid() {
        let big = format!(r#"{{"data":"{}"}}"#, "x".repeat(MAX_WRITE_BYTES));
        assert!(matches!(patch(web(), &big).prepare(), Err(WriteError::TooLarge(_))));
        let create = WriteRequest::Create {
            gvk: deployments(),
            namespace: Some("shop".into()),
            object: big,
        };
        assert!(matches!(create.prepare(), Err(WriteError::TooLarge(_))));
        invalid(patch(web(), "[1]"));
        invalid(patch(web(), "{"));
        invalid(WriteRequest::Patch {
            target: web(),
            patch_type: PatchType::Json,
            patch: r#"{"op":"add"}"#.into(),
        });
        assert!(
            WriteRequest::Patch {
                target: web(),
                patch_type: PatchType::Json,
                patch: r#"[{"op":"replace","path":"/spec/replicas","value":2}]"#.into(),
            }
            .prepare()
            .is_ok()
        );
    }

    #[test]
    fn an_object_is_completed_from_its_target_and_must_agree_with_it() {
        let update = |object: &str| WriteRequest::Update {
            target: web(),
            object: object.into(),
        };
        let prepared = update(r#"{"spec":{"replicas":2}}"#).prepare().unwrap();
        let Body::Object(object) = prepared.body else { panic!() };
        assert_eq!(object["apiVersion"], "apps/v1");
        assert_eq!(object["kind"], "Deployment");
        assert_eq!(object["metadata"]["name"], "web");
        assert!(invalid(update(r#"{"kind":"Secret"}"#)).contains("kind"));
        assert!(invalid(update(r#"{"metadata":{"name":"db"}}"#)).contains("metadata.name"));
        assert!(invalid(update(r#"{"metadata":{"namespace":"payments"}}"#)).contains("namespace"));
        invalid(update(r#"{"metadata":[]}"#));
        invalid(update("[]"));
        // A Scale keeps its own type.
        let scale = WriteRequest::Update {
            target: web().subresource("scale"),
            object: r#"{"apiVersion":"autoscaling/v1","kind":"Scale","spec":{"replicas":3}}"#.into(),
        };
        assert!(scale.prepare().is_ok());
    }

    #[test]
    fn a_created_object_is_named_by_itself_and_never_by_a_subresource() {
        let create = |object: &str| WriteRequest::Create {
            gvk: deployments(),
            namespace: Some("shop".into()),
            object: object.into(),
        };
        let prepared = create(r#"{"metadata":{"name":"web"}}"#).prepare().unwrap();
        assert_eq!(prepared.target.key(), "shop/web");
        assert_eq!(prepared.verb, Verb::Create);
        let generated = create(r#"{"metadata":{"generateName":"web-"}}"#).prepare().unwrap();
        assert_eq!(generated.target.key(), "shop/web-*");
        invalid(create(r#"{"metadata":{}}"#));
        invalid(create(r#"{"metadata":{"name":"../x"}}"#));
        let delete = WriteRequest::Delete {
            target: web().subresource("status"),
            options: DeleteOptions::default(),
        };
        invalid(delete);
        let stale = WriteRequest::Delete {
            target: web(),
            options: DeleteOptions {
                uid: Some("\n".into()),
                ..DeleteOptions::default()
            },
        };
        invalid(stale);
    }

    #[test]
    fn a_target_names_its_resource_as_grants_do() {
        assert_eq!(web().resource(), "apps/v1/Deployment");
        assert_eq!(web().subresource("scale").resource(), "apps/v1/Deployment/scale");
    }
}
