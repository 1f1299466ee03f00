//! A plugin's `[env]`: the values it takes from Secrets and ConfigMaps,
//! read and watched by the host, so a webhook's URL or a token never sits in
//! a manifest in Git.
//!
//! Each object named by some manifest is watched on its own (a list and watch
//! with the field selector `metadata.name=NAME`, which RBAC grants by
//! `resourceNames`), once however many plugins name it. A value that changes
//! swaps the plugins that read it in again, as a manifest change does; an
//! object or key that is missing, unreadable or too large fails the plugin
//! with a status that says which, and never the value: values appear nowhere
//! but in the plugin's environment.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::manifest::{EnvValue, EnvVar, KeyRef};
use kinformer_informers::Recover as _;

/// The largest value one variable may take from a Secret or ConfigMap.
pub const MAX_ENV_VALUE_BYTES: usize = 64 * 1024;

/// How long a plugin's load waits for an object's first answer.
const FIRST_ANSWER: Duration = Duration::from_secs(10);

/// Why a plugin's environment could not be made. Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("env {variable}: {object} {problem}")]
pub struct EnvError {
    /// The variable.
    pub variable: String,
    /// The object it names: `Secret monitoring/slack`.
    pub object: String,
    /// What is wrong.
    pub problem: EnvProblem,
}

/// What is wrong with a variable's Secret or ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvProblem {
    /// The object does not exist.
    #[error("not found")]
    Missing,
    /// The object has no such key.
    #[error("has no key {0:?}")]
    MissingKey(String),
    /// The value is over [`MAX_ENV_VALUE_BYTES`], or not UTF-8 text.
    #[error("key {key:?}: {problem}")]
    Unusable {
        /// The key.
        key: String,
        /// What is wrong with the value (never the value).
        problem: String,
    },
    /// The object could not be read (RBAC, the server).
    #[error("cannot be read: {0}")]
    Unreadable(String),
}

/// A watched object: a Secret or a ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Source {
    secret: bool,
    namespace: String,
    name: String,
}

impl Source {
    fn of(value: &EnvValue) -> Option<(Self, &KeyRef)> {
        let (secret, key) = match value {
            EnvValue::Literal(_) => return None,
            EnvValue::Secret(key) => (true, key),
            EnvValue::ConfigMap(key) => (false, key),
        };
        Some((
            Self {
                secret,
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            },
            key,
        ))
    }

    fn kind(&self) -> &'static str {
        if self.secret { "Secret" } else { "ConfigMap" }
    }
}

/// What the host knows of a watched object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// No answer yet.
    Pending,
    /// Its data, by key.
    Present(BTreeMap<String, Vec<u8>>),
    /// It does not exist.
    Missing,
    /// It could not be read before it was ever seen.
    Failed(String),
}

struct Watched {
    state: tokio::sync::watch::Receiver<State>,
    task: tokio::task::AbortHandle,
}

/// The watched Secrets and ConfigMaps of every plugin's `[env]`.
pub(super) struct EnvSources {
    client: kube::Client,
    objects: Mutex<BTreeMap<Source, Watched>>,
    /// Told when a watched object changed after its first answer.
    pub(super) changed: Arc<tokio::sync::Notify>,
}

impl EnvSources {
    pub(super) fn new(client: kube::Client) -> Self {
        Self {
            client,
            objects: Mutex::default(),
            changed: Arc::default(),
        }
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<Source, Watched>> {
        self.objects.lock().recover()
    }

    /// Starts watching what `env` names and has not been watched yet, and
    /// waits (a while) for each object's first answer.
    pub(super) async fn watch(&self, env: &[EnvVar]) {
        let mut waits = Vec::new();
        {
            let mut objects = self.objects();
            for (source, _) in env.iter().filter_map(|var| Source::of(&var.value)) {
                let watched = objects
                    .entry(source.clone())
                    .or_insert_with(|| self.start(source.clone()));
                waits.push(watched.state.clone());
            }
        }
        for mut state in waits {
            let _ = tokio::time::timeout(FIRST_ANSWER, state.wait_for(|state| *state != State::Pending)).await;
        }
    }

    /// Stops watching objects no manifest names any more.
    pub(super) fn retain<'a>(&self, envs: impl IntoIterator<Item = &'a [EnvVar]>) {
        let named: std::collections::BTreeSet<Source> = envs
            .into_iter()
            .flatten()
            .filter_map(|var| Source::of(&var.value).map(|(source, _)| source))
            .collect();
        self.objects().retain(|source, watched| {
            let keep = named.contains(source);
            if !keep {
                watched.task.abort();
            }
            keep
        });
    }

    /// The environment `env` makes now, or why it cannot be made.
    pub(super) fn resolve(&self, env: &[EnvVar]) -> Result<Vec<(String, String)>, EnvError> {
        let objects = self.objects();
        env.iter()
            .map(|var| {
                let Some((source, key)) = Source::of(&var.value) else {
                    let EnvValue::Literal(value) = &var.value else {
                        unreachable!("a value without a source is a literal")
                    };
                    return Ok((var.name.clone(), value.clone()));
                };
                let state = objects
                    .get(&source)
                    .map_or(State::Pending, |watched| watched.state.borrow().clone());
                value_of(&var.name, &source, key, &state).map(|value| (var.name.clone(), value))
            })
            .collect()
    }

    /// A digest of what `env` resolves to now (values and failures): a
    /// version of the plugin, as its file's digest and its manifest are.
    pub(super) fn digest(&self, env: &[EnvVar]) -> Option<String> {
        use sha2::Digest as _;
        if env.iter().all(|var| matches!(var.value, EnvValue::Literal(_))) {
            return None;
        }
        let mut hasher = sha2::Sha256::new();
        match self.resolve(env) {
            Ok(vars) => {
                for (name, value) in vars {
                    hasher.update((name.len() as u64).to_le_bytes());
                    hasher.update(name.as_bytes());
                    hasher.update((value.len() as u64).to_le_bytes());
                    hasher.update(value.as_bytes());
                }
            }
            Err(error) => hasher.update(error.to_string().as_bytes()),
        }
        Some(crate::plugin::digest(&hasher.finalize()))
    }

    /// Watches one object in a task of its own.
    fn start(&self, source: Source) -> Watched {
        let (sender, state) = tokio::sync::watch::channel(State::Pending);
        let config = watcher::Config::default().fields(&format!("metadata.name={}", source.name));
        let changed = Arc::clone(&self.changed);
        let task = if source.secret {
            let api = kube::Api::<Secret>::namespaced(self.client.clone(), &source.namespace);
            tokio::spawn(follow(
                watcher::watcher(api, config),
                secret_data,
                sender,
                changed,
                source.clone(),
            ))
        } else {
            let api = kube::Api::<ConfigMap>::namespaced(self.client.clone(), &source.namespace);
            tokio::spawn(follow(
                watcher::watcher(api, config),
                config_map_data,
                sender,
                changed,
                source.clone(),
            ))
        };
        Watched {
            state,
            task: task.abort_handle(),
        }
    }
}

impl Drop for EnvSources {
    fn drop(&mut self) {
        for watched in self.objects().values() {
            watched.task.abort();
        }
    }
}

/// Follows one object's watch, keeping `state` up to date and telling
/// `changed` of each change after the first answer.
async fn follow<K>(
    stream: impl futures::Stream<Item = watcher::Result<Event<K>>> + Send,
    data: fn(&K) -> BTreeMap<String, Vec<u8>>,
    state: tokio::sync::watch::Sender<State>,
    changed: Arc<tokio::sync::Notify>,
    source: Source,
) {
    let backoff = crate::retry::Backoff::default();
    let retry_in = backoff.next_delay();
    let mut stream = std::pin::pin!(stream.backoff(backoff));
    let mut repeats = crate::retry::Repeats::default();
    // Whether the list being read (after Init) held the object.
    let mut seen_in_list = false;
    while let Some(event) = stream.next().await {
        let next = match event {
            Ok(Event::Init) => {
                seen_in_list = false;
                continue;
            }
            Ok(Event::InitApply(object) | Event::Apply(object)) => {
                seen_in_list = true;
                State::Present(data(&object))
            }
            Ok(Event::InitDone) if seen_in_list => continue,
            Ok(Event::InitDone | Event::Delete(_)) => State::Missing,
            Err(error) => {
                let message = crate::retry::describe(source.kind(), &error);
                if let Some(line) = repeats.note(&message, retry_in.get()) {
                    tracing::warn!(
                        kind = source.kind(),
                        namespace = %source.namespace,
                        name = %source.name,
                        "a value of a plugin's [env] cannot be read: {line}"
                    );
                }
                if *state.borrow() != State::Pending {
                    continue;
                }
                State::Failed(message)
            }
        };
        let before = state.send_replace(next.clone());
        if before != next && before != State::Pending {
            tracing::info!(
                kind = source.kind(),
                namespace = %source.namespace,
                name = %source.name,
                "a value of a plugin's [env] changed: its plugins are swapped in again"
            );
            changed.notify_one();
        }
    }
}

fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), value.0.clone()))
        .collect()
}

fn config_map_data(config_map: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let text = config_map
        .data
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), value.as_bytes().to_vec()));
    let binary = config_map
        .binary_data
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), value.0.clone()));
    text.chain(binary).collect()
}

/// The value of `key` in `state`, as variable `variable` takes it.
fn value_of(variable: &str, source: &Source, key: &KeyRef, state: &State) -> Result<String, EnvError> {
    let error = |problem| EnvError {
        variable: variable.to_owned(),
        object: format!("{} {}/{}", source.kind(), source.namespace, source.name),
        problem,
    };
    match state {
        State::Pending => Err(error(EnvProblem::Unreadable(format!(
            "no answer from the API server within {} s",
            FIRST_ANSWER.as_secs()
        )))),
        State::Failed(message) => Err(error(EnvProblem::Unreadable(message.clone()))),
        State::Missing => Err(error(EnvProblem::Missing)),
        State::Present(data) => {
            let Some(bytes) = data.get(&key.key) else {
                return Err(error(EnvProblem::MissingKey(key.key.clone())));
            };
            let unusable = |problem: String| {
                error(EnvProblem::Unusable {
                    key: key.key.clone(),
                    problem,
                })
            };
            if bytes.len() > MAX_ENV_VALUE_BYTES {
                return Err(unusable(format!(
                    "the value is {} bytes, over the limit of {MAX_ENV_VALUE_BYTES}",
                    bytes.len()
                )));
            }
            String::from_utf8(bytes.clone()).map_err(|_| unusable("the value is not UTF-8 text".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> KeyRef {
        KeyRef {
            namespace: "monitoring".into(),
            name: "slack".into(),
            key: "url".into(),
        }
    }

    fn source() -> Source {
        Source::of(&EnvValue::Secret(key())).unwrap().0
    }

    #[test]
    fn a_present_key_is_the_value_and_every_failure_says_which_without_it() {
        let data = |value: &[u8]| State::Present(BTreeMap::from([("url".to_owned(), value.to_vec())]));
        assert_eq!(
            value_of(
                "SLACK_URL",
                &source(),
                &key(),
                &data(b"https://hooks.slack.com/services/T/B/secret")
            ),
            Ok("https://hooks.slack.com/services/T/B/secret".to_owned())
        );
        let missing = value_of("SLACK_URL", &source(), &key(), &State::Missing).unwrap_err();
        assert_eq!(missing.to_string(), "env SLACK_URL: Secret monitoring/slack not found");
        let no_key = value_of("SLACK_URL", &source(), &key(), &State::Present(BTreeMap::new())).unwrap_err();
        assert_eq!(
            no_key.to_string(),
            "env SLACK_URL: Secret monitoring/slack has no key \"url\""
        );
        let huge = vec![b's'; MAX_ENV_VALUE_BYTES + 1];
        let too_large = value_of("SLACK_URL", &source(), &key(), &data(&huge))
            .unwrap_err()
            .to_string();
        assert!(
            too_large.contains("over the limit") && !too_large.contains("sss"),
            "{too_large}"
        );
        let binary = value_of("SLACK_URL", &source(), &key(), &data(&[0xff, 0xfe])).unwrap_err();
        assert!(binary.to_string().contains("not UTF-8"), "{binary}");
        let forbidden = State::Failed("forbidden (403): secrets \"slack\" is forbidden".into());
        let unreadable = value_of("SLACK_URL", &source(), &key(), &forbidden).unwrap_err();
        assert!(
            unreadable.to_string().contains("cannot be read: forbidden (403)"),
            "{unreadable}"
        );
    }
}
