//! A running plugin instance: its own store, `init` and `handle` (or
//! `reconcile`) under the call deadline, poisoned after a trap.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::GroupVersionKind;
use wasmtime::Store;
use wasmtime::component::{ComponentType, Lower, TypedFunc};

use super::bindings::kinformer::plugin::types as wit;
use super::epoch::EpochClock;
use super::host::HostState;
use super::{Error, LogLine, Result, bindings, controller_bindings};
use crate::delta::{Delta, DeltaType};
use crate::registration::{ControllerSpec, IndexSpec, KeyMapping, Registration, Subscription};

/// The exports of an instance, by the world its component implements.
pub(super) enum Exports {
    /// `init` and `handle`.
    Handler(Handler),
    /// `init` and `reconcile`.
    Controller(controller_bindings::Controller),
}

/// An instance of a plugin that handles deltas: its bindings, and `handle`
/// itself, called with deltas that borrow the cached objects' text rather
/// than with copies of it.
pub(super) struct Handler {
    bindings: bindings::Writer,
    /// Type-checked once, at instantiation. `TypedFunc` is covariant in its
    /// parameters, so the `'static` one takes a batch borrowed for a call.
    handle: TypedFunc<HandleParams<'static>, HandleResults>,
}

/// `handle`'s parameters and results.
type HandleParams<'a> = (&'a [DeltaRef<'a>],);
type HandleResults = (Result<(), wit::Error>,);

impl Handler {
    /// Instantiates `pre` in `store`.
    pub(super) fn instantiate(
        store: &mut Store<HostState>,
        pre: &bindings::WriterPre<HostState>,
    ) -> wasmtime::Result<Self> {
        let instance = pre.instance_pre().instantiate(&mut *store)?;
        let bindings = bindings::Writer::new(&mut *store, &instance)?;
        // Checked here, so a component that does not match fails to start.
        let handle = instance
            .get_func(&mut *store, "handle")
            .ok_or_else(|| wasmtime::format_err!("the component exports no `handle`"))?
            .typed(&*store)?;
        Ok(Self { bindings, handle })
    }

    fn call_handle(
        &self,
        store: &mut Store<HostState>,
        batch: &[DeltaRef<'_>],
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let handle: TypedFunc<HandleParams<'_>, HandleResults> = self.handle;
        let (handled,) = handle.call(&mut *store, (batch,))?;
        Ok(handled)
    }
}

/// The WIT `delta` record, borrowing its strings from the delta.
#[derive(ComponentType, Lower)]
#[component(record)]
struct DeltaRef<'a> {
    #[component(name = "type")]
    type_: wit::DeltaType,
    gvk: GvkRef<'a>,
    key: &'a str,
    #[component(name = "resource-version")]
    resource_version: &'a str,
    object: &'a str,
    #[component(name = "old-object")]
    old_object: Option<&'a str>,
    #[component(name = "initial-list")]
    initial_list: bool,
}

/// The WIT `group-version-kind` record, borrowed.
#[derive(ComponentType, Lower)]
#[component(record)]
struct GvkRef<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
}

impl<'a> DeltaRef<'a> {
    fn of(delta: &'a Delta) -> Self {
        Self {
            type_: match delta.delta_type {
                DeltaType::Added => wit::DeltaType::Added,
                DeltaType::Updated => wit::DeltaType::Updated,
                DeltaType::Deleted => wit::DeltaType::Deleted,
                DeltaType::Replaced => wit::DeltaType::Replaced,
                DeltaType::Sync => wit::DeltaType::Sync,
            },
            gvk: GvkRef {
                group: &delta.gvk.group,
                version: &delta.gvk.version,
                kind: &delta.gvk.kind,
            },
            key: delta.object.key(),
            resource_version: delta.object.resource_version(),
            object: delta.object.json(),
            old_object: delta.old.as_ref().map(|old| old.json()),
            initial_list: delta.initial_list,
        }
    }
}

/// Counts an instance as alive, in the engine and for its plugin, until it is
/// dropped.
pub(super) struct LiveInstance {
    engine: Arc<AtomicUsize>,
    plugin: Arc<AtomicUsize>,
}

impl LiveInstance {
    /// Counts one more instance of a plugin with `alive` instances, unless it
    /// has `limit` already.
    pub(super) fn new(engine: &Arc<AtomicUsize>, alive: Arc<AtomicUsize>, limit: usize) -> Option<Self> {
        alive
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |alive| {
                (alive < limit).then_some(alive + 1)
            })
            .ok()?;
        engine.fetch_add(1, Ordering::Relaxed);
        Some(Self {
            engine: Arc::clone(engine),
            plugin: alive,
        })
    }
}

impl Drop for LiveInstance {
    fn drop(&mut self) {
        self.engine.fetch_sub(1, Ordering::Relaxed);
        self.plugin.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A running plugin: one instance in its own store.
pub struct PluginInstance {
    pub(super) name: String,
    pub(super) _live: LiveInstance,
    pub(super) store: Store<HostState>,
    pub(super) plugin: Exports,
    pub(super) call_timeout: std::time::Duration,
    /// Keeps the engine's epoch ticking while a call runs.
    pub(super) clock: EpochClock,
    pub(super) poisoned: bool,
}

impl std::fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginInstance")
            .field("name", &self.name)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl PluginInstance {
    /// The plugin's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's most recent log lines, oldest first.
    #[must_use]
    pub fn recent_logs(&self) -> Vec<LogLine> {
        self.store.data().log.recent()
    }

    /// Bytes of linear memory the plugin holds (what `limits.memory-mib`
    /// bounds).
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.store.data().store_limits.memory_bytes
    }

    /// Log lines dropped by the rate limit so far.
    #[must_use]
    pub fn dropped_log_lines(&self) -> u64 {
        self.store.data().log.dropped()
    }

    /// True for a controller (it reconciles keys), false for a plugin that
    /// handles deltas.
    #[must_use]
    pub fn is_controller(&self) -> bool {
        matches!(self.plugin, Exports::Controller(_))
    }

    /// Calls `init` with the config string and returns the registration. A
    /// controller's primary, owned and mapped resources are among its
    /// subscriptions, added when it did not list them.
    ///
    /// # Errors
    ///
    /// [`Error::Plugin`] when the plugin refuses to start, [`Error::Trap`] when it
    /// trapped or broke a limit.
    pub fn init(&mut self, config: &str) -> Result<Registration> {
        let (registration, controller) = match &self.plugin {
            Exports::Handler(_) => (
                self.call("init", |plugin, store| match plugin {
                    Exports::Handler(plugin) => plugin.bindings.call_init(store, config),
                    Exports::Controller(_) => unreachable_export("init"),
                })?,
                None,
            ),
            Exports::Controller(_) => {
                let registration = self.call("init", |plugin, store| match plugin {
                    Exports::Controller(plugin) => plugin.call_init(store, config),
                    Exports::Handler(_) => unreachable_export("init"),
                })?;
                let spec = ControllerSpec {
                    primary: from_wit_gvk(registration.primary),
                    owns: registration.owns.into_iter().map(from_wit_gvk).collect(),
                    maps: registration
                        .maps
                        .into_iter()
                        .map(|mapping| KeyMapping {
                            gvk: from_wit_gvk(mapping.gvk),
                            index: mapping.index,
                            field_path: mapping.field_path,
                        })
                        .collect(),
                    resync: (registration.resync_seconds > 0)
                        .then(|| Duration::from_secs(u64::from(registration.resync_seconds))),
                };
                (registration.base, Some(spec))
            }
        };
        let mut subscriptions: Vec<Subscription> = registration
            .subscriptions
            .into_iter()
            .map(|subscription| Subscription {
                gvk: from_wit_gvk(subscription.gvk),
                namespace: subscription.namespace,
                label_selector: subscription.label_selector,
                deliver: subscription.deliver,
            })
            .collect();
        if let Some(spec) = &controller {
            let wanted = std::iter::once(&spec.primary)
                .chain(&spec.owns)
                .chain(spec.maps.iter().map(|mapping| &mapping.gvk));
            for gvk in wanted {
                match subscriptions.iter_mut().find(|subscription| subscription.gvk == *gvk) {
                    Some(subscription) => subscription.deliver = true,
                    None => subscriptions.push(Subscription {
                        gvk: gvk.clone(),
                        namespace: None,
                        label_selector: None,
                        deliver: true,
                    }),
                }
            }
        }
        Ok(Registration {
            name: crate::text::sanitize(&registration.name, 253),
            version: crate::text::sanitize(&registration.version, 128),
            subscriptions,
            indexes: registration
                .indexes
                .into_iter()
                .map(|index| IndexSpec {
                    gvk: from_wit_gvk(index.gvk),
                    name: index.name,
                    field_path: index.field_path,
                })
                .collect(),
            controller,
        })
    }

    /// Delivers a batch of deltas, in order.
    ///
    /// # Errors
    ///
    /// [`Error::Plugin`] when the plugin reports an error for the batch (deliver
    /// it again or skip it), [`Error::Trap`] when it trapped or broke a limit;
    /// [`Error::Plugin`] too for a controller, which has no `handle`.
    pub fn handle(&mut self, batch: &[Delta]) -> Result<()> {
        let batch: Vec<DeltaRef<'_>> = batch.iter().map(DeltaRef::of).collect();
        self.call("handle", |plugin, store| match plugin {
            Exports::Handler(plugin) => plugin.call_handle(store, &batch),
            Exports::Controller(_) => Ok(Err(wit::Error {
                message: "a controller reconciles keys; it has no handle".into(),
            })),
        })
    }

    /// Reconciles one key (`namespace/name`, or `name`); returns when to
    /// reconcile it again regardless of changes, if the controller asked.
    ///
    /// # Errors
    ///
    /// [`Error::Plugin`] when the controller reports an error (retry the key
    /// with backoff), [`Error::Trap`] when it trapped or broke a limit;
    /// [`Error::Plugin`] too for a plugin that handles deltas.
    pub fn reconcile(&mut self, key: &str) -> Result<Option<Duration>> {
        let (namespace, name) = match key.split_once('/') {
            Some((namespace, name)) => (Some(namespace.to_owned()), name.to_owned()),
            None => (None, key.to_owned()),
        };
        let request = wit::ReconcileRequest {
            key: key.to_owned(),
            namespace,
            name,
        };
        let action = self.call("reconcile", |plugin, store| match plugin {
            Exports::Controller(plugin) => plugin.call_reconcile(store, &request),
            Exports::Handler(_) => Ok(Err(wit::Error {
                message: "a plugin that handles deltas has no reconcile".into(),
            })),
        })?;
        Ok(action.requeue_after_ms.map(Duration::from_millis))
    }

    /// Shares the inputs of the calls to come (cache queries, uncached
    /// reads) with a shadow, or stops sharing them.
    pub fn share_inputs(&mut self, inputs: Option<super::SharedInputs>) {
        self.store.data_mut().inputs = inputs;
    }

    /// The time the instance was paused for its CPU share since last asked.
    pub fn take_paused(&mut self) -> Duration {
        self.store.data_mut().budget.take_paused()
    }

    fn call<T>(
        &mut self,
        call: &'static str,
        f: impl FnOnce(&Exports, &mut Store<HostState>) -> wasmtime::Result<Result<T, wit::Error>>,
    ) -> Result<T> {
        if self.poisoned {
            return Err(Error::Poisoned(self.name.clone()));
        }
        let state = self.store.data_mut();
        if let Some(pause) = state.budget.start(Instant::now()) {
            std::thread::sleep(pause);
            state
                .budget
                .resume(pause, Instant::now(), super::component::thread_cpu_time);
        }
        self.store.data().log.begin_call();
        let running = super::component::start_call(&mut self.store, &self.clock, self.call_timeout);
        let outcome = f(&self.plugin, &mut self.store);
        drop(running);
        (self.store.data_mut().budget).stop(Instant::now(), super::component::thread_cpu_time);
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Error::Plugin {
                plugin: self.name.clone(),
                call,
                message: crate::text::sanitize(&error.message, crate::text::MAX_ERROR_LEN),
            }),
            Err(source) => {
                // After a trap the instance's state is undefined: never call it again.
                self.poisoned = true;
                let stderr = self.store.data().log.stderr_tail();
                Err(super::trap::trap(&self.name, call, source, &stderr))
            }
        }
    }
}

fn from_wit_gvk(gvk: wit::GroupVersionKind) -> GroupVersionKind {
    GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind)
}

/// The answer to calling an export the world does not have; never reached,
/// as the caller matched the world first.
fn unreachable_export<T>(call: &str) -> wasmtime::Result<Result<T, wit::Error>> {
    Ok(Err(wit::Error {
        message: format!("the component has no {call} of this world"),
    }))
}
