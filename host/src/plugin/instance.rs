//! A running plugin instance: its own store, `init` and `handle` (or
//! `reconcile`) under the call deadline, poisoned after a trap.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::GroupVersionKind;
use wasmtime::Store;
use wasmtime::component::{ComponentType, InstancePre, Lower, TypedFunc};

use super::component::Layout;
use super::epoch::EpochClock;
use super::interfaces::{HostState, from_wit_gvk};
use super::v0_1::controller;
use super::v0_1::kinformer::plugin::types as wit;
use super::{Error, LogLine, Result};
use crate::delta::{Delta, DeltaType};
use crate::registration::{ControllerSpec, IndexSpec, KeyMapping, Registration, Subscription};

/// The exports of an instance, by the world its component implements.
pub(super) enum Exports {
    /// `init` and `handle`.
    Handler(Handler),
    /// `init` and `reconcile`.
    Controller(controller::Controller),
}

/// An instance of a plugin that handles deltas: `init`, and `handle`
/// itself, called with deltas that borrow the cached objects' text rather
/// than with copies of it. Both are type-checked once, at instantiation, so
/// a component that does not match fails to start. `TypedFunc` is covariant
/// in its parameters, so the `'static` ones take arguments borrowed for a call.
pub(super) struct Handler {
    init: TypedFunc<(&'static str,), InitResults>,
    handle: HandleFunc,
    /// The texts and entries of a 0.2.0 batch, kept to be filled again.
    text: Vec<u8>,
    entries: Vec<EntryRef>,
}

/// `handle`, as the component's world version lays out its batch.
#[derive(Clone, Copy)]
enum HandleFunc {
    /// 0.1.0: a list of delta records.
    Records(TypedFunc<RecordParams<'static>, HandleResults>),
    /// 0.2.0: one batch record.
    Lean(TypedFunc<LeanParams<'static>, HandleResults>),
}

/// `init`'s results, and `handle`'s parameters and results.
type InitResults = (Result<wit::Registration, wit::Error>,);
type RecordParams<'a> = (&'a [DeltaRef<'a>],);
type LeanParams<'a> = (LeanBatch<'a>,);
type HandleResults = (Result<(), wit::Error>,);

impl Handler {
    /// Instantiates `pre`, a component taking batches in `layout`, in `store`.
    pub(super) fn instantiate(
        store: &mut Store<HostState>,
        pre: &InstancePre<HostState>,
        layout: Layout,
    ) -> wasmtime::Result<Self> {
        let instance = pre.instantiate(&mut *store)?;
        let export = |store: &mut Store<HostState>, name: &str| {
            instance
                .get_func(&mut *store, name)
                .ok_or_else(|| wasmtime::format_err!("the component exports no `{name}`"))
        };
        let init = export(store, "init")?.typed(&*store)?;
        let handle = export(store, "handle")?;
        let handle = match layout {
            Layout::Records => HandleFunc::Records(handle.typed(&*store)?),
            Layout::Lean => HandleFunc::Lean(handle.typed(&*store)?),
        };
        Ok(Self {
            init,
            handle,
            text: Vec::new(),
            entries: Vec::new(),
        })
    }

    fn call_init(
        &self,
        store: &mut Store<HostState>,
        config: &str,
    ) -> wasmtime::Result<Result<wit::Registration, wit::Error>> {
        let init: TypedFunc<(&str,), InitResults> = self.init;
        let (registration,) = init.call(&mut *store, (config,))?;
        Ok(registration)
    }

    fn call_handle(
        &mut self,
        store: &mut Store<HostState>,
        batch: &[Delta],
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        match self.handle {
            HandleFunc::Records(handle) => {
                let records: Vec<DeltaRef<'_>> = batch.iter().map(DeltaRef::of).collect();
                let handle: TypedFunc<RecordParams<'_>, HandleResults> = handle;
                let (handled,) = handle.call(&mut *store, (&records,))?;
                Ok(handled)
            }
            HandleFunc::Lean(handle) => {
                // A batch replayed across informers holds several types: each
                // run of one type is a batch of its own. An empty batch is
                // handed over as one, as to a 0.1.0 plugin.
                let runs = batch.chunk_by(|a, b| Arc::ptr_eq(&a.gvk, &b.gvk) || a.gvk == b.gvk);
                for run in runs.chain(batch.is_empty().then_some(batch)) {
                    self.text.clear();
                    self.entries.clear();
                    (self.entries).extend(run.iter().map(|delta| EntryRef::of(delta, &mut self.text)));
                    let lean = LeanBatch {
                        gvk: run.first().map_or(GvkRef::NONE, |delta| GvkRef::of(&delta.gvk)),
                        text: &self.text,
                        deltas: &self.entries,
                    };
                    // Emptied after every call, so its room is reused.
                    (store.data_mut().deltas).hold(run.iter().map(|delta| delta.old.clone()));
                    let handle: TypedFunc<LeanParams<'_>, HandleResults> = handle;
                    let outcome = handle.call(&mut *store, (lean,));
                    store.data_mut().deltas.clear();
                    let (handled,) = outcome?;
                    if handled.is_err() {
                        return Ok(handled);
                    }
                }
                Ok(Ok(()))
            }
        }
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

impl<'a> GvkRef<'a> {
    /// The type of an empty batch.
    const NONE: Self = Self {
        group: "",
        version: "",
        kind: "",
    };

    fn of(gvk: &'a GroupVersionKind) -> Self {
        Self {
            group: &gvk.group,
            version: &gvk.version,
            kind: &gvk.kind,
        }
    }
}

/// The 0.2.0 `delta-batch` record, borrowing its type and texts.
#[derive(ComponentType, Lower)]
#[component(record)]
struct LeanBatch<'a> {
    gvk: GvkRef<'a>,
    text: &'a [u8],
    deltas: &'a [EntryRef],
}

/// The 0.2.0 `delta-entry` record.
#[derive(ComponentType, Lower)]
#[component(record)]
struct EntryRef {
    #[component(name = "type")]
    type_: wit::DeltaType,
    #[component(name = "key-len")]
    key_len: u32,
    #[component(name = "resource-version-len")]
    resource_version_len: u32,
    #[component(name = "object-len")]
    object_len: u32,
    #[component(name = "has-old-object")]
    has_old_object: bool,
    #[component(name = "initial-list")]
    initial_list: bool,
}

impl EntryRef {
    /// The entry of `delta`, its texts appended to `text`.
    fn of(delta: &Delta, text: &mut Vec<u8>) -> Self {
        let mut append = |part: &str| {
            text.extend_from_slice(part.as_bytes());
            // A cached object is far below 4 GiB: the host bounds what it caches.
            u32::try_from(part.len()).unwrap_or(u32::MAX)
        };
        Self {
            type_: wit_delta_type(delta.delta_type),
            key_len: append(delta.object.key()),
            resource_version_len: append(delta.object.resource_version()),
            object_len: append(delta.object.json()),
            has_old_object: delta.old.is_some(),
            initial_list: delta.initial_list,
        }
    }
}

fn wit_delta_type(delta_type: DeltaType) -> wit::DeltaType {
    match delta_type {
        DeltaType::Added => wit::DeltaType::Added,
        DeltaType::Updated => wit::DeltaType::Updated,
        DeltaType::Deleted => wit::DeltaType::Deleted,
        DeltaType::Replaced => wit::DeltaType::Replaced,
        DeltaType::Sync => wit::DeltaType::Sync,
    }
}

impl<'a> DeltaRef<'a> {
    fn of(delta: &'a Delta) -> Self {
        Self {
            type_: wit_delta_type(delta.delta_type),
            gvk: GvkRef::of(&delta.gvk),
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

    /// Bytes of memory the plugin holds, as `limits.memory-mib` counts
    /// them: its linear memories and tables, and what the host holds for
    /// it (as last measured).
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.store.data().limiter.total()
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
                    Exports::Handler(plugin) => plugin.call_init(store, config),
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
        self.call("handle", |plugin, store| match plugin {
            Exports::Handler(plugin) => plugin.call_handle(store, batch),
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
        self.store.data_mut().call.inputs = inputs;
    }

    /// The time the instance was paused for its CPU share since last asked.
    pub fn take_paused(&mut self) -> Duration {
        self.store.data_mut().budget.take_paused()
    }

    fn call<T>(
        &mut self,
        call: &'static str,
        f: impl FnOnce(&mut Exports, &mut Store<HostState>) -> wasmtime::Result<Result<T, wit::Error>>,
    ) -> Result<T> {
        if self.poisoned {
            return Err(Error::Poisoned(self.name.clone()));
        }
        let state = self.store.data_mut();
        if let Some(pause) = state.budget.start(Instant::now()) {
            state.budget.sit_out(pause, super::component::thread_cpu_time);
        }
        self.store.data().log.begin_call();
        let running = super::component::start_call(&mut self.store, &self.clock, self.call_timeout);
        let outcome = f(&mut self.plugin, &mut self.store);
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

/// The answer to calling an export the world does not have; never reached,
/// as the caller matched the world first.
fn unreachable_export<T>(call: &str) -> wasmtime::Result<Result<T, wit::Error>> {
    Ok(Err(wit::Error {
        message: format!("the component has no {call} of this world"),
    }))
}
