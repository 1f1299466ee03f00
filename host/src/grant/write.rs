//! Write grants: verbs on resources (and subresources) in namespaces, and
//! whether a plugin's writes are made or only validated by the server.

use std::collections::BTreeSet;
use std::fmt;

use kube::api::GroupVersionKind;
use serde::{Deserialize, Serialize};

use super::{GrantError, ResourcePattern, Scope};

/// How a plugin's writes reach the cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    /// Writes are made.
    #[default]
    Live,
    /// Every write is sent with `dryRun=All`: the API server validates it and
    /// answers as if it were made, and persists nothing.
    DryRun,
}

/// What a write does, as the API server's RBAC names it (`apply` is a `patch`
/// there; it is granted apart here, as server-side apply takes over fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    /// Create an object (events are created too).
    Create,
    /// Replace an object or a subresource.
    Update,
    /// Patch an object or a subresource (JSON merge patch or JSON patch).
    Patch,
    /// Server-side apply to an object or a subresource.
    Apply,
    /// Delete an object.
    Delete,
    /// Read one object from the API server, uncached (`[[grant.read]]`).
    Get,
    /// List objects from the API server, uncached (`[[grant.read]]`).
    List,
}

impl Verb {
    /// The verb as written in a manifest: `create`, `update`, ...
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Apply => "apply",
            Self::Delete => "delete",
            Self::Get => "get",
            Self::List => "list",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule of a write grant: these verbs on these resources in these
/// namespaces.
///
/// A resource pattern is `apiVersion/Kind[/subresource]`, `*` standing for any
/// apiVersion or any kind. A pattern without a subresource grants the object
/// only, not its subresources (`status`, `scale`): those are granted by name.
/// A cluster-scoped object is written only under a rule for every namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRule {
    pub(super) verbs: BTreeSet<Verb>,
    pub(super) resources: Vec<ResourcePattern>,
    pub(super) namespaces: Scope,
}

impl WriteRule {
    /// A rule granting `verbs` on `resources` in `namespaces`.
    ///
    /// # Errors
    ///
    /// When a pattern is malformed, or there is no verb or no resource.
    pub fn new<'a>(
        verbs: impl IntoIterator<Item = Verb>,
        resources: impl IntoIterator<Item = &'a str>,
        namespaces: Scope,
    ) -> Result<Self, GrantError> {
        let verbs: BTreeSet<Verb> = verbs.into_iter().collect();
        let resources = resources
            .into_iter()
            .map(ResourcePattern::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if verbs.is_empty() {
            return Err(GrantError::NoVerb);
        }
        if resources.is_empty() {
            return Err(GrantError::NoResource);
        }
        Ok(Self {
            verbs,
            resources,
            namespaces,
        })
    }

    /// The verbs it grants, in order.
    pub fn verbs(&self) -> impl Iterator<Item = Verb> + '_ {
        self.verbs.iter().copied()
    }

    /// The namespaces it grants.
    #[must_use]
    pub fn namespaces(&self) -> &Scope {
        &self.namespaces
    }

    /// The resources it grants.
    #[must_use]
    pub fn resources(&self) -> &[ResourcePattern] {
        &self.resources
    }

    pub(super) fn allows(
        &self,
        verb: Verb,
        gvk: &GroupVersionKind,
        subresource: Option<&str>,
        namespace: Option<&str>,
    ) -> bool {
        self.verbs.contains(&verb)
            && namespace.map_or(self.namespaces.is_all(), |namespace| self.namespaces.allows(namespace))
            && self
                .resources
                .iter()
                .any(|pattern| pattern.matches(gvk) && pattern.subresource.as_deref() == subresource)
    }
}

impl fmt::Display for WriteRule {
    /// `create, patch v1/ConfigMap, apps/v1/Deployment/scale in namespaces a, b`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verbs: Vec<&str> = self.verbs.iter().map(|verb| verb.as_str()).collect();
        let resources: Vec<String> = self.resources.iter().map(ToString::to_string).collect();
        write!(f, "{} {}", verbs.join(", "), resources.join(", "))?;
        match self.namespaces.namespaces() {
            None => write!(f, " in every namespace"),
            Some(namespaces) if namespaces.is_empty() => write!(f, " in no namespace"),
            Some(namespaces) => {
                let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
                write!(f, " in namespaces {}", namespaces.join(", "))
            }
        }
    }
}
