//! Uncached reads: a plugin's `get` and `list` sent to the API server, for the
//! resources no informer can serve (`metrics.k8s.io` answers no watch).
//!
//! A read passes the same gate as a write, but for leadership: the grant
//! (`[[grant.read]]`, verbs `get` and `list`), then its own token bucket
//! (`reads-per-second`, `read-burst`); then it is sent through discovery, under
//! the write timeout, and its answer is cut at the plugin's `query-bytes`.

use kube::api::{DynamicObject, GetParams, GroupVersionKind, ListParams};

use super::WriteError;
use super::discovery::Discovery;
use super::request::{check_gvk, check_name, check_namespace, shown};
use super::writer::Writer;
use crate::grant::Verb;

/// The longest label selector a read may carry.
const MAX_SELECTOR_LEN: usize = 4096;

/// An uncached read: one object, or a list.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadRequest {
    /// The resource type.
    pub gvk: GroupVersionKind,
    /// The namespace; `None` for a cluster-scoped object, or a list across
    /// every namespace.
    pub namespace: Option<String>,
    /// What is read.
    pub what: Read,
}

/// Which objects a read asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The object of this name.
    Get(String),
    /// The objects matching this label selector (all when `None`), at most
    /// `limit` (0: the server's default).
    List {
        /// A Kubernetes label selector.
        label_selector: Option<String>,
        /// At most this many objects.
        limit: u32,
    },
}

impl ReadRequest {
    /// Reads the object `name` of type `gvk` in `namespace`.
    #[must_use]
    pub fn get(gvk: GroupVersionKind, namespace: Option<&str>, name: &str) -> Self {
        Self {
            gvk,
            namespace: namespace.map(str::to_owned),
            what: Read::Get(name.to_owned()),
        }
    }

    /// Lists the objects of type `gvk` in `namespace` (every namespace when
    /// `None`) matching `label_selector`.
    #[must_use]
    pub fn list(gvk: GroupVersionKind, namespace: Option<&str>, label_selector: Option<&str>, limit: u32) -> Self {
        Self {
            gvk,
            namespace: namespace.map(str::to_owned),
            what: Read::List {
                label_selector: label_selector.map(str::to_owned),
                limit,
            },
        }
    }

    fn verb(&self) -> Verb {
        match self.what {
            Read::Get(_) => Verb::Get,
            Read::List { .. } => Verb::List,
        }
    }

    fn check(&self) -> Result<(), WriteError> {
        check_gvk(&self.gvk)?;
        if let Some(namespace) = &self.namespace {
            check_namespace(namespace)?;
        }
        match &self.what {
            Read::Get(name) => check_name("name", name),
            Read::List {
                label_selector: Some(selector),
                ..
            } if selector.len() > MAX_SELECTOR_LEN => Err(WriteError::Invalid(format!(
                "label selector is {} bytes, the limit is {MAX_SELECTOR_LEN}",
                selector.len()
            ))),
            Read::List {
                label_selector: Some(selector),
                ..
            } => kinformer_selector::Selector::parse(selector)
                .map(drop)
                .map_err(|error| WriteError::Invalid(format!("label selector {:?}: {error}", shown(selector)))),
            Read::List { .. } => Ok(()),
        }
    }
}

impl Writer {
    /// Reads from the API server, uncached: the object as JSON (`None` when
    /// it does not exist), or the list as the server wrote it (`items` and
    /// all).
    ///
    /// # Errors
    ///
    /// [`WriteError::Invalid`] for a malformed request, [`WriteError::Denied`]
    /// outside the grant, [`WriteError::Throttled`] over the plugin's read
    /// rate, [`WriteError::TooLarge`] for an answer over its `query-bytes`,
    /// and what the API server answered.
    pub async fn read(&self, request: ReadRequest) -> Result<Option<String>, WriteError> {
        request.check()?;
        self.admit_read(&request)?;
        let inner = &self.inner;
        let started = std::time::Instant::now();
        let answer = inner
            .cluster
            .timed(None, inner.timeout, inner.cluster.read(&request))
            .await;
        let answer = answer.and_then(|text| match text {
            Some(text) if text.len() > inner.read_bytes => Err(WriteError::TooLarge(format!(
                "the answer is {} bytes, over this plugin's query-bytes of {}",
                text.len(),
                inner.read_bytes
            ))),
            other => Ok(other),
        });
        tracing::debug!(
            plugin = %inner.plugin,
            verb = request.verb().as_str(),
            resource = %format!("{}/{}", request.gvk.api_version(), request.gvk.kind),
            namespace = request.namespace.as_deref().unwrap_or(""),
            outcome = answer.as_ref().map_or_else(WriteError::kind, |_| "ok"),
            ms = started.elapsed().as_millis() as u64,
            "uncached read"
        );
        answer
    }

    /// [`Writer::read`] from a thread that may block (a plugin's).
    ///
    /// # Errors
    ///
    /// As [`Writer::read`].
    pub fn read_blocking(&self, request: ReadRequest) -> Result<Option<String>, WriteError> {
        let writer = self.clone();
        self.wait_for(async move { writer.read(request).await })
    }

    /// The grant, then the read bucket.
    fn admit_read(&self, request: &ReadRequest) -> Result<(), WriteError> {
        let inner = &self.inner;
        let verb = request.verb();
        if !inner
            .grant
            .allows_write(verb, &request.gvk, None, request.namespace.as_deref())
        {
            let place = match &request.namespace {
                Some(namespace) => format!("in namespace {namespace}"),
                None => "cluster-wide".to_owned(),
            };
            return Err(WriteError::Denied(format!(
                "{verb} {} {} {place} is not granted to this plugin",
                request.gvk.api_version(),
                request.gvk.kind
            )));
        }
        super::writer::take_token(&inner.reads, inner.read_rate, "reads")
    }
}

/// Sends a read through kube-rs (as `cluster`'s identity): the object or list as the server wrote it;
/// `None` for an object that does not exist.
pub(super) async fn send(
    cluster: &super::Cluster,
    client: &kube::Client,
    discovery: &Discovery,
    request: &ReadRequest,
) -> Result<Option<String>, WriteError> {
    let (resource, capabilities) = discovery.resource(client, &request.gvk).await?;
    let namespaced = capabilities.scope == kube::discovery::Scope::Namespaced;
    let what = format!("{} {}", request.gvk.api_version(), request.gvk.kind);
    let namespace = match (&request.what, namespaced, request.namespace.as_deref()) {
        (_, false, Some(_)) => {
            return Err(WriteError::Invalid(format!(
                "{what} is cluster-scoped: name no namespace"
            )));
        }
        (Read::Get(_), true, None) => {
            return Err(WriteError::Invalid(format!("{what} is namespaced: name its namespace")));
        }
        (_, _, namespace) => namespace,
    };
    let url = <DynamicObject as kube::Resource>::url_path(&resource, namespace);
    let request_builder = kube::core::Request::new(url);
    let built = match &request.what {
        Read::Get(name) => request_builder.get(name, &GetParams::default()),
        Read::List { label_selector, limit } => {
            let mut params = ListParams::default();
            params.label_selector.clone_from(label_selector);
            if *limit > 0 {
                params.limit = Some(*limit);
            }
            request_builder.list(&params)
        }
    };
    let mut built = built.map_err(|error| WriteError::Invalid(error.to_string()))?;
    built.extensions_mut().insert(match request.what {
        Read::Get(_) => "get",
        Read::List { .. } => "list",
    });
    cluster.sign(&mut built)?;
    match client.request_text(built).await {
        Ok(text) => Ok(Some(text)),
        Err(kube::Error::Api(status)) if status.code == 404 && matches!(request.what, Read::Get(_)) => Ok(None),
        Err(error) => Err(WriteError::from_kube(&error)),
    }
}
