//! The controllers of row 8: a no-op reconcile of every pod, as a kinformer controller plugin and as a kube-rs `Controller`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kinformer::runtime::{PluginState, Runtime};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use crate::child::cpu_seconds;
use crate::consumers::{AbortOnDrop, Consumer, Side, kinformer_consumer};

/// The controller plugin's name (its file stem), as its status shows it.
const PLUGIN: &str = "pod-controller";

/// The reconciler test plugin as a no-op controller of pods, with a queue of
/// deltas that never overflows.
const MANIFEST: &str = "config = \"bench,primary=v1/Pod,noop\"\n[limits]\nqueue-capacity = 1000000\n";

/// How long without a reconcile (and, for kinformer, with nothing queued)
/// counts as idle.
const QUIET: Duration = Duration::from_millis(500);

/// How long a controller may take to become idle.
const STUCK: Duration = Duration::from_secs(300);

/// How often the reconciles are counted while waiting for idle.
const POLL: Duration = Duration::from_millis(10);

/// Reconciles counted so far, and this process's CPU time when the last of
/// them was seen.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    pub(crate) reconciles: u64,
    pub(crate) cpu_s: f64,
}

/// A controller of every pod with a no-op reconcile, counting its reconciles.
pub(crate) enum PodController {
    /// kinformer's runtime with the reconciler plugin as a no-op controller:
    /// the plugin's status counts its reconciles and queued keys.
    Kinformer(Consumer),
    /// kube-rs's `Controller`: its reconcile counts itself (its queue is not
    /// observable).
    Kube {
        reconciles: Arc<AtomicU64>,
        _task: AbortOnDrop<()>,
    },
}

impl PodController {
    /// Starts one side's controller; it reconciles every pod once it has synced.
    pub(crate) async fn start(client: kube::Client, side: Side) -> anyhow::Result<Self> {
        match side {
            Side::Kinformer => {
                let plugin = (PLUGIN, plugin_artifacts::test_plugin("reconciler.wasm"), MANIFEST);
                Ok(Self::Kinformer(kinformer_consumer(client, &[plugin], &[]).await?))
            }
            Side::KubePod => Ok(kube_controller(kube::Api::<Pod>::all(client), ())),
            Side::KubeDynamic => {
                let resource = ApiResource::erase::<Pod>(&());
                let api = kube::Api::<DynamicObject>::all_with(client, &resource);
                Ok(kube_controller(api, resource))
            }
            Side::Floor => anyhow::bail!("the floor consumer is no controller"),
        }
    }

    /// Reconciles so far, and keys waiting (as of the last reconcile).
    fn progress(&self) -> anyhow::Result<(u64, usize)> {
        match self {
            Self::Kinformer(consumer) => {
                let statuses = consumer.runtime().map(Runtime::status).unwrap_or_default();
                let Some(status) = statuses.into_iter().find(|status| status.name == PLUGIN) else {
                    bail!("the runtime has no plugin {PLUGIN}");
                };
                if status.state != PluginState::Running || status.errors > 0 {
                    bail!(
                        "the controller plugin is {:?} after {} errors (last: {:?})",
                        status.state,
                        status.errors,
                        status.last_error
                    );
                }
                Ok((status.reconciles, status.queue_depth))
            }
            Self::Kube { reconciles, .. } => Ok((reconciles.load(Ordering::Relaxed), 0)),
        }
    }

    /// Waits until at least `at_least` reconciles have been counted, nothing is
    /// queued and no reconcile has happened for [`QUIET`]; returns the mark of
    /// the last reconcile seen (or of the call, if none came).
    ///
    /// # Errors
    ///
    /// When the kinformer plugin fails, or the controller is not idle after
    /// five minutes.
    pub(crate) async fn idle(&self, at_least: u64) -> anyhow::Result<Mark> {
        let started = Instant::now();
        let mut last = Mark {
            reconciles: self.progress()?.0,
            cpu_s: cpu_seconds(),
        };
        let mut seen_at = started;
        loop {
            let (reconciles, queued) = self.progress()?;
            let now = Instant::now();
            if reconciles != last.reconciles {
                last = Mark {
                    reconciles,
                    cpu_s: cpu_seconds(),
                };
                seen_at = now;
            } else if reconciles >= at_least && queued == 0 && now - seen_at >= QUIET {
                return Ok(last);
            }
            if now - started > STUCK {
                bail!(
                    "the controller reconciled {reconciles} times ({at_least} expected) with {queued} keys queued, \
                     and is not idle after {STUCK:?}: does it watch the pods?"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub(crate) async fn stop(self) {
        if let Self::Kinformer(consumer) = self {
            consumer.stop().await;
        }
    }
}

/// kube-rs's side as its users write it: a `Controller` over `api` with the
/// default watcher config, a no-op reconcile and an error policy.
fn kube_controller<K>(api: kube::Api<K>, dyntype: K::DynamicType) -> PodController
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + std::fmt::Debug + Unpin + Send + Sync,
{
    let reconciles = Arc::new(AtomicU64::new(0));
    let run = Controller::new_with(api, watcher::Config::default(), dyntype).run(
        reconcile,
        error_policy,
        Arc::clone(&reconciles),
    );
    let task = tokio::spawn(run.for_each(|_| async {}));
    PodController::Kube {
        reconciles,
        _task: AbortOnDrop(task),
    }
}

/// kube-rs's no-op reconcile: counts itself and waits for the object's next
/// change.
async fn reconcile<K>(object: Arc<K>, reconciles: Arc<AtomicU64>) -> Result<Action, Infallible> {
    std::hint::black_box(object);
    reconciles.fetch_add(1, Ordering::Relaxed);
    Ok(Action::await_change())
}

/// kube-rs's error policy, as its examples write it: try again in five
/// seconds (never called: the no-op reconcile does not fail).
fn error_policy<K>(_object: Arc<K>, _error: &Infallible, _reconciles: Arc<AtomicU64>) -> Action {
    Action::requeue(Duration::from_secs(5))
}
