//! `kinformer check`: loads a plugin with the manifest beside it, runs its
//! `init` against an empty cache, and reviews what it registers against its
//! grant — the same review the runtime applies — and prints what the grant
//! lets it write. Nothing is sent to a cluster: writes in `init` answer
//! `denied`.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use kinformer::caches::Caches;
use kinformer::grant::{Review, Verb, WriteMode, WriteRule};
use kinformer::indexer::indexer;
use kinformer::manifest::Manifest;
use kinformer::manifest::{EnvValue, EnvVar};
use kinformer::outbound::HttpGrant;
use kinformer::plugin::{PluginEngine, PluginOptions};
use kinformer::registration::Registration;
use kinformer::runtime::prepare;

/// What a plugin registers, and what its grant makes of it.
#[derive(Debug)]
pub struct Report {
    /// The plugin file.
    pub file: PathBuf,
    /// What `init` returned.
    pub registration: Registration,
    /// The grant's review of it.
    pub review: Review,
    /// Why the runtime could not serve what it gets, if it could not.
    pub unservable: Option<String>,
    /// The file's size in bytes.
    pub size: u64,
    /// How long it took to compile.
    pub compile: std::time::Duration,
    /// The limits it runs with.
    pub limits: kinformer::limits::Limits,
    /// What the grant lets it write.
    pub writes: Vec<WriteRule>,
    /// Whether its writes are made or dry runs.
    pub mode: WriteMode,
    /// The namespaces whose objects it sees; `None` for every namespace.
    pub namespaces: Option<Vec<String>>,
    /// Where its HTTP requests may go.
    pub http: HttpGrant,
    /// Its environment: names and where their values come from (never the
    /// values of Secrets and ConfigMaps, which `check` does not read).
    pub env: Vec<EnvVar>,
}

/// Checks the plugin file `plugin`: its manifest, its component, its `init`
/// (with `config`, or the manifest's), and the review of its registration.
///
/// # Errors
///
/// When the manifest is broken, the file is not a plugin component, or `init`
/// fails.
pub fn check(plugin: &Path, config: Option<&str>) -> anyhow::Result<Report> {
    check_with(&PluginEngine::new()?, plugin, config)
}

/// [`check`] with `engine` (one with a disk cache, say).
///
/// # Errors
///
/// As [`check`].
pub fn check_with(engine: &PluginEngine, plugin: &Path, config: Option<&str>) -> anyhow::Result<Report> {
    let manifest = Manifest::for_plugin(plugin)?;
    let config = config.unwrap_or(&manifest.config);
    let bytes = read_plugin(plugin, &manifest)?;
    let size = bytes.len() as u64;
    let started = std::time::Instant::now();
    let component = engine.load_file_bytes(plugin, &bytes)?;
    let compile = started.elapsed();
    // No cluster is read: `init` gets the manifest's literal settings only.
    let literals = manifest
        .env
        .iter()
        .filter_map(|var| match &var.value {
            EnvValue::Literal(value) => Some((var.name.clone(), value.clone())),
            EnvValue::Secret(_) | EnvValue::ConfigMap(_) => None,
        })
        .collect();
    let options = PluginOptions::with_limits(manifest.limits)
        .grant(manifest.grant.clone())
        .env(literals);
    let mut instance = component.instantiate(Caches::new(), options)?;
    let registration = instance
        .init(config)
        .with_context(|| format!("{} refused to start", plugin.display()))?;
    let review = manifest.grant.review(&registration);
    // The caches the runtime would wire it to, empty: an index it cannot
    // make, or a primary resource it is not granted, fails here as there.
    let unservable = prepare::wire(&registration, &review, &manifest.grant, &Caches::new(), |_, _| {
        indexer().0
    })
    .err()
    .map(|error| error.to_string());
    Ok(Report {
        file: plugin.to_owned(),
        registration,
        review,
        unservable,
        size,
        compile,
        limits: manifest.limits,
        writes: manifest.grant.writes().to_vec(),
        mode: manifest.mode,
        namespaces: manifest
            .grant
            .namespaces()
            .namespaces()
            .map(|names| names.iter().cloned().collect()),
        http: manifest.grant.http().clone(),
        env: manifest.env,
    })
}

/// The plugin file's bytes, within its manifest's `limits.module-mib`.
///
/// # Errors
///
/// When the file cannot be read, is not a regular file, or is over the limit
/// (naming it).
pub(crate) fn read_plugin(plugin: &Path, manifest: &Manifest) -> anyhow::Result<Vec<u8>> {
    kinformer::file::read_regular(plugin, manifest.limits.module_bytes).map_err(|error| {
        let over = matches!(error, kinformer::file::FileError::TooLarge { .. });
        let error = anyhow::Error::from(error);
        if over {
            error.context(format!(
                "{}: the plugin file is too large (limits.module-mib)",
                plugin.display()
            ))
        } else {
            error.context(format!("{}: cannot read the plugin file", plugin.display()))
        }
    })
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registration = &self.registration;
        writeln!(
            f,
            "{}: {} {}",
            self.file.display(),
            registration.name,
            registration.version
        )?;
        let limits = &self.limits;
        writeln!(
            f,
            "  {} bytes (limit {}), compiled in {} ms (limit {} ms)",
            self.size,
            limits.module_bytes,
            self.compile.as_millis(),
            limits.compile_timeout.as_millis()
        )?;
        if self.compile > limits.compile_timeout {
            writeln!(
                f,
                "  TOO SLOW: the runtime stops waiting for its compile (limits.compile-timeout-ms)"
            )?;
        }
        writeln!(
            f,
            "  {} subscriptions (limit {}), {} indexes (limit {})",
            self.review.subscriptions.len(),
            limits.max_subscriptions,
            self.review.indexes.len(),
            limits.max_indexes
        )?;
        if let Some(reason) = self.review.over_limits(limits) {
            writeln!(f, "  OVER LIMITS: {reason}; the runtime does not start it")?;
        }
        if let Some(reason) = &self.unservable {
            writeln!(f, "  CANNOT START: {reason}; the runtime does not start it")?;
        }
        if let Some(controller) = &self.review.controller {
            let primary = &controller.primary;
            write!(f, "  controller of {} {}", primary.api_version(), primary.kind)?;
            for owned in &controller.owns {
                write!(f, ", owns {} {}", owned.api_version(), owned.kind)?;
            }
            for mapping in &controller.maps {
                write!(
                    f,
                    ", maps {} {} by index {} over {}",
                    mapping.gvk.api_version(),
                    mapping.gvk.kind,
                    mapping.index,
                    mapping.field_path
                )?;
            }
            if let Some(resync) = controller.resync {
                write!(f, ", resync every {} s", resync.as_secs())?;
            }
            writeln!(f)?;
        }
        match &self.namespaces {
            None => writeln!(f, "  sees every namespace")?,
            Some(names) => writeln!(
                f,
                "  sees namespaces {} only (grant.namespaces): deltas of others are not delivered",
                names.join(", ")
            )?,
        }
        for subscription in &self.review.subscriptions {
            let gvk = &subscription.gvk;
            let mode = if subscription.deliver { "watch" } else { "cache" };
            write!(f, "  {mode} {} {}", gvk.api_version(), gvk.kind)?;
            if let Some(namespace) = &subscription.namespace {
                write!(f, " in namespace {namespace}")?;
            }
            if let Some(selector) = &subscription.label_selector {
                write!(f, " selecting {selector}")?;
            }
            writeln!(f)?;
        }
        for index in &self.review.indexes {
            let gvk = &index.gvk;
            writeln!(
                f,
                "  index {} on {} {} by {}",
                index.name,
                gvk.api_version(),
                gvk.kind,
                index.field_path
            )?;
        }
        for refusal in &self.review.refused {
            writeln!(f, "  REFUSED {refusal}")?;
        }
        if self.review.handles_nothing() {
            writeln!(
                f,
                "  HANDLES NOTHING: it subscribes to nothing it may watch, so it would handle no delta \
                 (does its config name a resource, and does its grant hold it?)"
            )?;
        }
        let (reads, writes): (Vec<&WriteRule>, Vec<&WriteRule>) = self
            .writes
            .iter()
            .partition(|rule| rule.verbs().all(|verb| matches!(verb, Verb::Get | Verb::List)));
        for rule in reads {
            writeln!(f, "  read {rule} (uncached, from the API server)")?;
        }
        if self.http.is_empty() {
            writeln!(f, "  makes no HTTP requests")?;
        }
        for entry in self.http.entries() {
            writeln!(f, "  http to {entry}")?;
        }
        for network in self.http.networks() {
            writeln!(f, "  http opens network {network}")?;
        }
        for problem in self.http.problems() {
            writeln!(f, "  WARNING http: {problem}")?;
        }
        for var in &self.env {
            match &var.value {
                EnvValue::Literal(_) => writeln!(f, "  env {} (set in the manifest)", var.name)?,
                EnvValue::Secret(key) => writeln!(
                    f,
                    "  env {} from key {} of Secret {}/{}",
                    var.name, key.key, key.namespace, key.name
                )?,
                EnvValue::ConfigMap(key) => writeln!(
                    f,
                    "  env {} from key {} of ConfigMap {}/{}",
                    var.name, key.key, key.namespace, key.name
                )?,
            }
        }
        for rule in &writes {
            writeln!(f, "  write {rule}")?;
        }
        match (writes.is_empty(), self.mode) {
            (true, _) => writeln!(f, "  writes nothing"),
            (false, WriteMode::DryRun) => {
                writeln!(f, "  writes in dry-run mode: sent with dryRun=All, nothing persisted")
            }
            (false, WriteMode::Live) => Ok(()),
        }
    }
}
