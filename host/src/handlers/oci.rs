//! Wasm modules as OCI artifacts: pulled by digest from a registry, checked,
//! and cached on disk; pushed the way `wkg` and `oras` push components.
//!
//! A pull, in order (the first check that fails is its [`PullError`]):
//!
//! | step | refused when | reason |
//! | --- | --- | --- |
//! | the reference | it is not `REGISTRY/REPOSITORY@sha256:...` (a tag only with [`PullConfig::allow_tags`]) | `TagRefused`, `PullFailed` |
//! | the cache | (a digest already pulled is read from disk, never pulled again; for a tenant, once its credentials reach the manifest: [`Cached::Check`]) | `PullFailed` |
//! | every request | the address policy refuses where it connects, a redirect or token realm included ([`registry`]) | `PullFailed` |
//! | the manifest | it is over [`registry::MANIFEST_BYTES`] or lists over [`MAX_LAYERS`] layers; its bytes are not the reference's digest; it is not an image manifest | `PullFailed`, `DigestMismatch` |
//! | the layer | none is `application/wasm` (or the single layer of `application/vnd.wasm.content.layer.v1+wasm`) | `PullFailed` |
//! | its size | the manifest declares more than the Handler's `limits.moduleMib`; the registry sends more than declared | `PullFailed` |
//! | its bytes | they are not the layer's digest | `DigestMismatch` |
//!
//! The requests are the host's own distribution client's ([`registry`]),
//! over connections made as plugins' are ([`crate::outbound::Dialer`]): a
//! layer's `urls` are never fetched, redirects and token realms are checked
//! as the registry is, and no error carries a byte a server sent. The whole
//! pull is held to [`PullConfig::timeout`]; the layer is read as a stream and
//! never buffered past its declared size. A registry that does not answer
//! (connection refused, 5xx, the timeout) is
//! [transient](PullError::is_transient): the caller tries again later.
//!
//! Each pull has its own session with the registry, so one tenant's
//! registry token is never offered on another's pull.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::Digest as _;

use crate::outbound::Dialer;

pub mod registry;

/// The media type of a Wasm component's layer, as `wkg` and `oras` push it.
pub const WASM_LAYER: &str = "application/wasm";
/// The config media type of a Wasm component artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The layer media type of `wasm-to-oci` and Kubewarden: accepted as an
/// artifact's only layer.
pub const WASM_CONTENT_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The most layers a module's manifest may list.
pub const MAX_LAYERS: usize = 16;

/// How modules are pulled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PullConfig {
    /// Accept a reference by tag, resolved to a digest at each pull; without
    /// it a tag is refused (`TagRefused`).
    pub allow_tags: bool,
    /// Registries (`HOST:PORT`) spoken to over plain HTTP; every other one
    /// over HTTPS. A redirect or token realm is plain HTTP only to one of
    /// them, and never after HTTPS.
    pub insecure_registries: Vec<String>,
    /// The longest one pull may take, from the reference to the last byte.
    pub timeout: Duration,
    /// Where pulled modules are kept, by digest; `None`: in memory only.
    pub cache_dir: Option<PathBuf>,
}

impl Default for PullConfig {
    /// Digests only, HTTPS only, 30 seconds, no disk cache.
    fn default() -> Self {
        Self {
            allow_tags: false,
            insecure_registries: Vec::new(),
            timeout: Duration::from_secs(30),
            cache_dir: None,
        }
    }
}

impl PullConfig {
    /// Sets [`PullConfig::allow_tags`].
    #[must_use]
    pub fn allow_tags(mut self, allow: bool) -> Self {
        self.allow_tags = allow;
        self
    }

    /// Adds a registry to [`PullConfig::insecure_registries`].
    #[must_use]
    pub fn insecure_registry(mut self, registry: impl Into<String>) -> Self {
        self.insecure_registries.push(registry.into());
        self
    }

    /// Sets [`PullConfig::timeout`].
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`PullConfig::cache_dir`].
    #[must_use]
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The client pushes use.
    fn client(&self) -> Result<Client, OciDistributionError> {
        // The host's TLS is ring's; the registry client takes the process's.
        let _already = rustls::crypto::ring::default_provider().install_default();
        Client::try_from(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.insecure_registries.clone()),
            platform_resolver: None,
            // The pull's own timeout bounds the rest.
            connect_timeout: Some(self.timeout),
            ..ClientConfig::default()
        })
    }
}

/// Registry credentials, from a `kubernetes.io/dockerconfigjson` Secret.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    /// No credentials.
    #[default]
    Anonymous,
    /// HTTP basic credentials (the registry may trade them for a token).
    Basic {
        /// The user name.
        username: String,
        /// The password or token.
        password: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Anonymous => f.write_str("Anonymous"),
            Self::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
        }
    }
}

impl Credentials {
    /// The credentials a Docker config (`.dockerconfigjson`) holds for
    /// `registry` (`HOST[:PORT]`): `auths` keyed by the host, with or without
    /// a scheme and path, holding `username` and `password` or `auth`
    /// (base64 of `USER:PASSWORD`). None for it: anonymous.
    ///
    /// # Errors
    ///
    /// When the config is not JSON, or its entry for `registry` is broken.
    pub fn from_docker_config(config: &[u8], registry: &str) -> Result<Self, PullError> {
        let broken = |why: String| PullError::Credentials(why);
        let config: serde_json::Value = serde_json::from_slice(config)
            .map_err(|error| broken(format!(".dockerconfigjson is not JSON: {error}")))?;
        let Some(auths) = config["auths"].as_object() else {
            return Ok(Self::Anonymous);
        };
        let host_of = |key: &str| {
            let key = key.split_once("://").map_or(key, |(_, rest)| rest);
            key.split('/').next().unwrap_or(key).to_owned()
        };
        let Some(entry) = auths
            .iter()
            .find(|(key, _)| host_of(key) == registry)
            .map(|(_, entry)| entry)
        else {
            return Ok(Self::Anonymous);
        };
        if let (Some(username), Some(password)) = (entry["username"].as_str(), entry["password"].as_str()) {
            return Ok(Self::Basic {
                username: username.to_owned(),
                password: password.to_owned(),
            });
        }
        let Some(auth) = entry["auth"].as_str() else {
            return Err(broken(format!(
                ".dockerconfigjson: auths.{registry} has neither username and password nor auth"
            )));
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .ok()
            .and_then(|decoded| String::from_utf8(decoded).ok())
            .ok_or_else(|| broken(format!(".dockerconfigjson: auths.{registry}.auth is not base64 text")))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| broken(format!(".dockerconfigjson: auths.{registry}.auth is not USER:PASSWORD")))?;
        Ok(Self::Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        })
    }

    fn auth(&self) -> RegistryAuth {
        match self {
            Self::Anonymous => RegistryAuth::Anonymous,
            Self::Basic { username, password } => RegistryAuth::Basic(username.clone(), password.clone()),
        }
    }

    fn basic(&self) -> Option<(&str, &str)> {
        match self {
            Self::Anonymous => None,
            Self::Basic { username, password } => Some((username, password)),
        }
    }
}

/// Why a module was not pulled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The reference names a tag, and tags are not allowed.
    #[error(
        "{0}: a tag may name other bytes tomorrow; give the digest (REPOSITORY@sha256:...), or start the host with --allow-tags"
    )]
    TagRefused(String),
    /// The reference does not parse.
    #[error("{reference}: not an OCI reference: {error}")]
    Reference {
        /// The reference given.
        reference: String,
        /// What is wrong with it.
        error: String,
    },
    /// The registry served bytes that are not the digest asked for.
    #[error("{what}: the registry served {actual}, not {expected}")]
    DigestMismatch {
        /// The manifest or layer, by reference.
        what: String,
        /// Its digest as the reference or manifest names it.
        expected: String,
        /// What was served.
        actual: String,
    },
    /// The manifest is not an image manifest.
    #[error("{reference}: the manifest is not an OCI image manifest: {error}")]
    Manifest {
        /// The reference pulled.
        reference: String,
        /// Where the parse failed, in the host's words (never the text it
        /// failed on).
        error: String,
    },
    /// The manifest lists more than [`MAX_LAYERS`] layers.
    #[error("{reference}: the manifest lists {layers} layers, over the {MAX_LAYERS} a module's manifest may list")]
    Layers {
        /// The reference pulled.
        reference: String,
        /// How many it lists.
        layers: usize,
    },
    /// No layer holds a Wasm module.
    #[error(
        "{reference}: none of its {layers} layers is of media type {WASM_LAYER} (nor is it a single {WASM_CONTENT_LAYER} layer)"
    )]
    MediaType {
        /// The reference pulled.
        reference: String,
        /// How many layers it has.
        layers: usize,
    },
    /// The layer is larger than the Handler's `limits.moduleMib`, or than the
    /// manifest declares.
    #[error("{reference}: the module is {size} bytes, over {limit}")]
    TooLarge {
        /// The reference pulled.
        reference: String,
        /// The size declared or served.
        size: u64,
        /// Which limit, in words.
        limit: String,
    },
    /// The pull secret cannot be read.
    #[error("{0}")]
    Credentials(String),
    /// A request to the registry (or where it sent the pull) was refused,
    /// answered with an error status, over its bound or not answered:
    /// transient as [`registry::Error::is_transient`] says.
    #[error("{reference}: {error}")]
    Registry {
        /// The reference pulled.
        reference: String,
        /// Which request, and what happened to it.
        #[source]
        error: registry::Error,
    },
    /// The layer's stream ended early, or the pull's task ended: transient.
    #[error("{reference}: {error}")]
    Unavailable {
        /// The reference pulled.
        reference: String,
        /// What failed, in the host's words.
        error: String,
    },
    /// The pull took longer than [`PullConfig::timeout`]: transient.
    #[error("{reference}: no module within {timeout:?}")]
    TimedOut {
        /// The reference pulled.
        reference: String,
        /// The timeout.
        timeout: Duration,
    },
}

impl PullError {
    /// The reason of the Handler's `Ready` condition: `TagRefused`,
    /// `DigestMismatch` or `PullFailed`.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TagRefused(_) => "TagRefused",
            Self::DigestMismatch { .. } => "DigestMismatch",
            _ => "PullFailed",
        }
    }

    /// Whether trying again later may succeed: the registry did not answer,
    /// answered a status that may change ([`registry::Error::is_transient`]),
    /// or the secret may be fixed. A running plugin keeps running meanwhile;
    /// every other error unloads it, and is not tried again while what the
    /// pull was made from stays the same.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Registry { error, .. } => error.is_transient(),
            Self::Unavailable { .. } | Self::TimedOut { .. } | Self::Credentials(_) => true,
            _ => false,
        }
    }
}

/// A pulled module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// The manifest's digest (`sha256:...`), a tag's resolution.
    pub digest: String,
    /// The module's bytes.
    pub module: Vec<u8>,
}

/// Whether `reference` names a digest; `None` when it does not parse.
#[must_use]
pub fn pinned_digest(reference: &str) -> Option<String> {
    Reference::try_from(reference).ok()?.digest().map(str::to_owned)
}

/// The registry (`HOST[:PORT]`) of `reference`.
///
/// # Errors
///
/// When it does not parse.
pub fn registry_of(reference: &str) -> Result<String, PullError> {
    Ok(parse(reference)?.registry().to_owned())
}

fn parse(reference: &str) -> Result<Reference, PullError> {
    Reference::try_from(reference).map_err(|error| PullError::Reference {
        reference: reference.to_owned(),
        error: error.to_string(),
    })
}

/// How a pull may take a module its digest already has in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// Take it: a ClusterHandler's pull, or a tenant policy that lets
    /// namespaces share the cache.
    Take,
    /// Take it once the pull's credentials reach its manifest (a `HEAD` by
    /// digest): a tenant's pull, so that a digest another namespace pulled
    /// is not a way into a repository this one cannot read.
    Check,
}

/// Pulls modules as its [`PullConfig`] says, into its cache, connecting as
/// its [`Dialer`] allows. Cheap to clone: the clones share the cache and
/// the record of whose credentials reached which manifest.
#[derive(Debug, Clone, Default)]
pub struct Puller {
    config: PullConfig,
    dialer: Dialer,
    cache: ModuleCache,
    /// (namespace, `REGISTRY/REPOSITORY`, digest): whose credentials reached
    /// which manifest.
    reached: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<(String, String, String)>>>,
}

impl Puller {
    /// A puller caching in `config.cache_dir`, and in memory, connecting
    /// through `dialer`.
    #[must_use]
    pub fn new(config: PullConfig, dialer: Dialer) -> Self {
        Self {
            cache: ModuleCache::new(config.cache_dir.clone()),
            config,
            dialer,
            reached: std::sync::Arc::default(),
        }
    }

    /// The module of `digest`, when it was pulled before and is within
    /// `limit` bytes.
    #[must_use]
    pub fn cached(&self, digest: &str, limit: u64) -> Option<Vec<u8>> {
        self.cache.get(digest, limit)
    }

    /// Forgets the modules held in memory but those of `digests` and those
    /// that came in since the last call, whose pulls' results may not have
    /// been taken yet (the disk cache stays).
    pub fn retain(&self, digests: &std::collections::BTreeSet<String>) {
        self.cache.retain(digests);
    }

    /// Notes that the credentials of `namespace` reached the manifest of
    /// `digest` in `reference`'s repository (a pull of theirs succeeded).
    pub fn reach(&self, namespace: &str, reference: &str, digest: &str) {
        if let Some(repository) = repository_of(reference) {
            self.reached_set()
                .insert((namespace.to_owned(), repository, digest.to_owned()));
        }
    }

    /// Whether the credentials of `namespace` reached the manifest of
    /// `digest` in `reference`'s repository; may be stale by one pull.
    #[must_use]
    pub fn reached(&self, namespace: &str, reference: &str, digest: &str) -> bool {
        repository_of(reference).is_some_and(|repository| {
            self.reached_set()
                .contains(&(namespace.to_owned(), repository, digest.to_owned()))
        })
    }

    fn reached_set(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<(String, String, String)>> {
        self.reached.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Pulls the Wasm module of `reference` as `credentials`, refusing one
    /// over `limit` bytes; a digest in the cache is taken as `cached` says.
    ///
    /// # Errors
    ///
    /// [`PullError`], each variant a step of the module's table.
    pub async fn pull(
        &self,
        reference: &str,
        credentials: &Credentials,
        limit: u64,
        cached: Cached,
    ) -> Result<Pulled, PullError> {
        let config = &self.config;
        let parsed = parse(reference)?;
        if parsed.digest().is_none() && !config.allow_tags {
            return Err(PullError::TagRefused(reference.to_owned()));
        }
        if cached == Cached::Take
            && let Some(digest) = parsed.digest()
            && let Some(module) = self.cache.get(digest, limit)
        {
            return Ok(Pulled {
                digest: digest.to_owned(),
                module,
            });
        }
        let deadline = tokio::time::Instant::now() + config.timeout;
        let timed_out = || PullError::TimedOut {
            reference: reference.to_owned(),
            timeout: config.timeout,
        };
        match tokio::time::timeout_at(deadline, self.fetch(&parsed, credentials, limit, deadline)).await {
            // What fails for now once the deadline has passed failed because
            // of it: the pull's connections are closed then.
            Ok(Err(error)) if error.is_transient() && tokio::time::Instant::now() >= deadline => Err(timed_out()),
            Ok(result) => result,
            Err(_) => Err(timed_out()),
        }
    }

    /// The module from the registry: only a `HEAD` of its manifest when
    /// its digest is cached (reached here only for [`Cached::Check`]).
    async fn fetch(
        &self,
        reference: &Reference,
        credentials: &Credentials,
        limit: u64,
        deadline: tokio::time::Instant,
    ) -> Result<Pulled, PullError> {
        let whole = reference.whole();
        let failed = |error| PullError::Registry {
            reference: whole.clone(),
            error,
        };
        let mut session = registry::Session::new(
            self.dialer.clone(),
            &self.config.insecure_registries,
            reference.resolve_registry(),
            reference.repository(),
            credentials.basic(),
            deadline,
        );
        if let Some(digest) = reference.digest()
            && let Some(module) = self.cache.get(digest, limit)
        {
            session.check_manifest(digest).await.map_err(failed)?;
            return Ok(Pulled {
                digest: digest.to_owned(),
                module,
            });
        }
        let named = reference.digest().or(reference.tag()).unwrap_or("latest");
        let manifest = session.manifest(named).await.map_err(failed)?;
        let served = format!("sha256:{}", hex(&sha2::Sha256::digest(&manifest)));
        if let Some(expected) = reference.digest()
            && served != expected
        {
            return Err(PullError::DigestMismatch {
                what: format!("{whole}: its manifest"),
                expected: expected.to_owned(),
                actual: served,
            });
        }
        let digest = served;
        if let Some(module) = self.cache.get(&digest, limit) {
            return Ok(Pulled { digest, module });
        }
        let manifest: OciImageManifest = serde_json::from_slice(&manifest).map_err(|error| PullError::Manifest {
            reference: whole.clone(),
            error: json_error(&error),
        })?;
        if manifest.layers.len() > MAX_LAYERS {
            return Err(PullError::Layers {
                reference: whole,
                layers: manifest.layers.len(),
            });
        }
        let layer = wasm_layer(&manifest).ok_or_else(|| PullError::MediaType {
            reference: whole.clone(),
            layers: manifest.layers.len(),
        })?;
        let declared = u64::try_from(layer.size).map_err(|_| PullError::Manifest {
            reference: whole.clone(),
            error: "its layer's size is negative".to_owned(),
        })?;
        if declared > limit {
            return Err(PullError::TooLarge {
                reference: whole.clone(),
                size: declared,
                limit: format!("its limits.moduleMib ({limit} bytes)"),
            });
        }
        if !is_sha256(&layer.digest) {
            return Err(PullError::Manifest {
                reference: whole,
                error: "its layer's digest is not sha256:HEX".to_owned(),
            });
        }
        let module = read_layer(&mut session, &whole, layer, declared).await?;
        self.cache.put(&digest, &module);
        Ok(Pulled { digest, module })
    }
}

/// `REGISTRY/REPOSITORY` of `reference`.
fn repository_of(reference: &str) -> Option<String> {
    let parsed = Reference::try_from(reference).ok()?;
    Some(format!("{}/{}", parsed.resolve_registry(), parsed.repository()))
}

/// Where a manifest failed to parse, without the text it failed on.
fn json_error(error: &serde_json::Error) -> String {
    let what = match error.classify() {
        serde_json::error::Category::Io | serde_json::error::Category::Syntax => "it is not JSON",
        serde_json::error::Category::Eof => "it ends early",
        serde_json::error::Category::Data => "a field is missing or of the wrong type",
    };
    format!("{what} (line {}, column {})", error.line(), error.column())
}

/// Whether `digest` is `sha256:` and 64 lower-case hex digits.
fn is_sha256(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')))
}

/// The layer holding the module: the `application/wasm` one, or the only
/// layer when it is `application/vnd.wasm.content.layer.v1+wasm`.
fn wasm_layer(manifest: &OciImageManifest) -> Option<&OciDescriptor> {
    manifest
        .layers
        .iter()
        .find(|layer| layer.media_type == WASM_LAYER)
        .or_else(|| match manifest.layers.as_slice() {
            [only] if only.media_type == WASM_CONTENT_LAYER => Some(only),
            _ => None,
        })
}

/// Streams `layer` (`declared` bytes) from its repository, never from its
/// `urls`, stopping at the first byte past it, and checks its digest.
async fn read_layer(
    session: &mut registry::Session,
    whole: &str,
    layer: &OciDescriptor,
    declared: u64,
) -> Result<Vec<u8>, PullError> {
    let too_large = |size: u64| PullError::TooLarge {
        reference: whole.to_owned(),
        size,
        limit: format!("the {declared} bytes its manifest declares"),
    };
    let mut blob = session.blob(&layer.digest).await.map_err(|error| PullError::Registry {
        reference: whole.to_owned(),
        error,
    })?;
    if let Some(length) = blob.length
        && length > declared
    {
        return Err(too_large(length));
    }
    let capacity = usize::try_from(declared).unwrap_or(0);
    let mut module = Vec::with_capacity(capacity);
    let mut hasher = sha2::Sha256::new();
    while let Some(chunk) = blob.chunk().await {
        let chunk = chunk.map_err(|error| PullError::Registry {
            reference: whole.to_owned(),
            error,
        })?;
        let size = module.len() as u64 + chunk.len() as u64;
        if size > declared {
            return Err(too_large(size));
        }
        hasher.update(&chunk);
        module.extend_from_slice(&chunk);
    }
    if (module.len() as u64) < declared {
        return Err(PullError::Unavailable {
            reference: whole.to_owned(),
            error: format!("the layer ended after {} of {declared} bytes", module.len()),
        });
    }
    let actual = format!("sha256:{}", hex(&hasher.finalize()));
    if actual != layer.digest {
        return Err(PullError::DigestMismatch {
            what: format!("{whole}: its layer"),
            expected: layer.digest.clone(),
            actual,
        });
    }
    Ok(module)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut hex, byte| {
            let _infallible = write!(hex, "{byte:02x}");
            hex
        })
}

/// Pulled modules by manifest digest: in memory, and on disk when there is
/// a directory (`DIR/sha256/HEX`, each written to a temporary file then
/// renamed).
#[derive(Debug, Clone, Default)]
struct ModuleCache {
    dir: Option<PathBuf>,
    memory: std::sync::Arc<std::sync::Mutex<BTreeMap<String, Held>>>,
}

impl ModuleCache {
    fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            memory: std::sync::Arc::default(),
        }
    }

    fn path(&self, digest: &str) -> Option<PathBuf> {
        let (algorithm, hex) = digest.split_once(':')?;
        let safe = |part: &str| !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_alphanumeric());
        (safe(algorithm) && safe(hex)).then(|| self.dir.as_ref().map(|dir| dir.join(algorithm).join(hex)))?
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Held>> {
        self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The module cached for `digest`, when there is one within `limit`.
    fn get(&self, digest: &str, limit: u64) -> Option<Vec<u8>> {
        if let Some(Held { module, .. }) = self.memory().get(digest) {
            return (module.len() as u64 <= limit).then(|| module.clone());
        }
        let path = self.path(digest)?;
        let size = std::fs::metadata(&path).ok()?.len();
        if size > limit {
            return None;
        }
        let module = std::fs::read(&path).ok()?;
        self.memory().insert(digest.to_owned(), Held::fresh(module.clone()));
        Some(module)
    }

    fn retain(&self, digests: &std::collections::BTreeSet<String>) {
        self.memory().retain(|digest, held| {
            let keep = digests.contains(digest) || held.fresh;
            held.fresh = false;
            keep
        });
    }

    /// Keeps `module` for `digest`; a failed write only costs a pull later.
    fn put(&self, digest: &str, module: &[u8]) {
        self.memory().insert(digest.to_owned(), Held::fresh(module.to_vec()));
        let Some(path) = self.path(digest) else { return };
        let write = || -> std::io::Result<()> {
            let dir = path.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir)?;
            let (partial, mut file) = tempfile_in(dir)?;
            file.write_all(module)?;
            file.sync_all()?;
            std::fs::rename(&partial, &path)
        };
        if let Err(error) = write() {
            tracing::warn!(digest, path = %path.display(), error = %error, "cannot cache a pulled module");
        }
    }
}

/// A module held in memory.
#[derive(Debug)]
struct Held {
    module: Vec<u8>,
    /// Whether it came in since the last [`ModuleCache::retain`]: a pull's
    /// result the controller has not taken yet is kept through one.
    fresh: bool,
}

impl Held {
    fn fresh(module: Vec<u8>) -> Self {
        Self { module, fresh: true }
    }
}

/// A new file in `dir`, named for this process and a counter.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!(".partial-{}-{n}", std::process::id()));
    let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
    Ok((path, file))
}

/// Why a module was not pushed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The reference does not parse.
    #[error(transparent)]
    Reference(#[from] PullError),
    /// The registry refused or did not answer.
    #[error("{reference}: {source}")]
    Registry {
        /// The reference pushed to.
        reference: String,
        /// The client's error.
        #[source]
        source: OciDistributionError,
    },
}

/// Pushes `module` to `reference` (`REGISTRY/REPOSITORY[:TAG]`) as a Wasm
/// component artifact (config [`WASM_CONFIG`], one [`WASM_LAYER`] layer);
/// returns the pinned reference `REGISTRY/REPOSITORY@sha256:...`.
///
/// # Errors
///
/// [`PushError`].
pub async fn push(
    module: &[u8],
    reference: &str,
    credentials: &Credentials,
    config: &PullConfig,
) -> Result<String, PushError> {
    let parsed = parse(reference)?;
    let registry = |source| PushError::Registry {
        reference: reference.to_owned(),
        source,
    };
    let client = config.client().map_err(registry)?;
    let digest_of = |bytes: &[u8]| format!("sha256:{}", hex(&sha2::Sha256::digest(bytes)));
    let layer_digest = digest_of(module);
    let wasm_config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm", "os": "wasip2", "layerDigests": [layer_digest]}))
    .unwrap_or_default();
    let config_digest = digest_of(&wasm_config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_IMAGE_MEDIA_TYPE,
        "artifactType": WASM_CONFIG,
        "config": {"mediaType": WASM_CONFIG, "digest": config_digest, "size": wasm_config.len()},
        "layers": [{"mediaType": WASM_LAYER, "digest": layer_digest, "size": module.len()}],
    }))
    .unwrap_or_default();
    let manifest_digest = digest_of(&manifest);
    client
        .auth(&parsed, &credentials.auth(), oci_client::RegistryOperation::Push)
        .await
        .map_err(registry)?;
    client
        .push_blob(&parsed, wasm_config, &config_digest)
        .await
        .map_err(registry)?;
    client
        .push_blob(&parsed, module.to_vec(), &layer_digest)
        .await
        .map_err(registry)?;
    client
        .push_manifest_raw(&parsed, manifest, http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE))
        .await
        .map_err(registry)?;
    Ok(format!(
        "{}/{}@{manifest_digest}",
        parsed.registry(),
        parsed.repository()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_refused_unless_allowed_and_a_digest_is_pinned() {
        let refused = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(Puller::default().pull(
                "127.0.0.1:1/shop/logger:v1",
                &Credentials::Anonymous,
                1 << 20,
                Cached::Take,
            ));
        assert_eq!(refused.unwrap_err().reason(), "TagRefused");
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            pinned_digest(&format!("127.0.0.1:5000/shop/logger@{digest}")),
            Some(digest)
        );
        assert_eq!(pinned_digest("127.0.0.1:5000/shop/logger:v1"), None);
        assert_eq!(registry_of("127.0.0.1:5000/shop/logger:v1").unwrap(), "127.0.0.1:5000");
    }

    #[test]
    fn docker_config_credentials_are_found_by_host_in_either_form() {
        let config = br#"{"auths": {
            "https://registry.example.com/v1/": {"auth": "dXNlcjpzM2NyZXQ="},
            "127.0.0.1:5000": {"username": "shop", "password": "pw"}}}"#;
        assert_eq!(
            Credentials::from_docker_config(config, "registry.example.com").unwrap(),
            Credentials::Basic {
                username: "user".into(),
                password: "s3cret".into()
            }
        );
        assert_eq!(
            Credentials::from_docker_config(config, "127.0.0.1:5000").unwrap(),
            Credentials::Basic {
                username: "shop".into(),
                password: "pw".into()
            }
        );
        assert_eq!(
            Credentials::from_docker_config(config, "other.example.com").unwrap(),
            Credentials::Anonymous
        );
        let broken = br#"{"auths": {"r.example.com": {"auth": "not base64!"}}}"#;
        assert!(Credentials::from_docker_config(broken, "r.example.com").is_err());
        assert!(
            !format!(
                "{:?}",
                Credentials::from_docker_config(config, "127.0.0.1:5000").unwrap()
            )
            .contains("pw")
        );
    }

    #[test]
    fn transient_errors_keep_a_plugin_and_refusals_name_their_reason() {
        let unavailable = PullError::Unavailable {
            reference: "r".into(),
            error: "connection refused".into(),
        };
        assert!(unavailable.is_transient());
        assert_eq!(unavailable.reason(), "PullFailed");
        let mismatch = PullError::DigestMismatch {
            what: "r".into(),
            expected: "a".into(),
            actual: "b".into(),
        };
        assert!(!mismatch.is_transient());
        assert_eq!(mismatch.reason(), "DigestMismatch");
    }

    #[test]
    fn the_wasm_layer_is_application_wasm_or_a_single_content_layer() {
        let layer = |media_type: &str| OciDescriptor {
            media_type: media_type.to_owned(),
            ..OciDescriptor::default()
        };
        let manifest = |layers| OciImageManifest {
            layers,
            ..OciImageManifest::default()
        };
        let wkg = manifest(vec![layer("application/octet-stream"), layer(WASM_LAYER)]);
        assert_eq!(wasm_layer(&wkg).unwrap().media_type, WASM_LAYER);
        assert!(wasm_layer(&manifest(vec![layer(WASM_CONTENT_LAYER)])).is_some());
        assert!(wasm_layer(&manifest(vec![layer(WASM_CONTENT_LAYER), layer(WASM_CONTENT_LAYER)])).is_none());
        assert!(wasm_layer(&manifest(vec![layer("application/vnd.oci.image.layer.v1.tar")])).is_none());
    }

    #[test]
    fn the_cache_writes_by_digest_and_refuses_odd_digests_and_oversized_files() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::new(Some(dir.path().to_owned()));
        let digest = format!("sha256:{}", "b".repeat(64));
        cache.put(&digest, b"module");
        assert_eq!(cache.get(&digest, 100).unwrap(), b"module");
        assert!(cache.get(&digest, 3).is_none(), "over the limit");
        cache.retain(&std::collections::BTreeSet::new());
        let reopened = ModuleCache::new(Some(dir.path().to_owned()));
        assert_eq!(reopened.get(&digest, 100).unwrap(), b"module", "read back from disk");
        assert!(cache.path("sha256:../../etc").is_none());
        let left: Vec<_> = std::fs::read_dir(dir.path().join("sha256")).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left");
        assert!(ModuleCache::new(None).get(&digest, 100).is_none());
    }

    #[test]
    fn a_module_just_pulled_outlives_one_retain_that_does_not_name_it() {
        let cache = ModuleCache::new(None);
        let digest = format!("sha256:{}", "c".repeat(64));
        cache.put(&digest, b"module");
        // The controller's retain ran before it took the pull's result.
        cache.retain(&std::collections::BTreeSet::new());
        assert_eq!(cache.get(&digest, 100).unwrap(), b"module");
        cache.retain(&std::collections::BTreeSet::new());
        cache.retain(&std::collections::BTreeSet::new());
        assert!(cache.get(&digest, 100).is_none(), "no plugin runs it");
        cache.put(&digest, b"module");
        let running = std::collections::BTreeSet::from([digest.clone()]);
        for _ in 0..3 {
            cache.retain(&running);
        }
        assert_eq!(cache.get(&digest, 100).unwrap(), b"module");
    }
}
