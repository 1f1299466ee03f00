//! Controllers: plugins that reconcile keys instead of handling deltas.
//!
//! A controller names a primary resource; the host keeps a workqueue of its
//! keys (`namespace/name`) with client-go's semantics and calls
//! [`Controller::reconcile`] for each: once however often the key was queued,
//! never twice at the same time, again with backoff after an error, and again
//! after [`Action::requeue_after`]. Changes to the primary objects, to objects
//! they own (a controller `ownerReference`) and to objects mapped to them
//! through an index all enqueue keys; so does a periodic resync.
//!
//! # Examples
//!
//! ```no_run
//! use kinformer_sdk::controller::{Action, Controller, ControllerRegistration, Request};
//! use kinformer_sdk::{Gvk, Result, cache, info};
//!
//! struct ConfigMapAuditor;
//!
//! impl Controller for ConfigMapAuditor {
//!     fn init(_config: &str) -> Result<(Self, ControllerRegistration)> {
//!         let primary = Gvk::new("", "v1", "ConfigMap");
//!         Ok((Self, ControllerRegistration::new("auditor", "0.1.0", primary)))
//!     }
//!
//!     fn reconcile(&mut self, request: Request) -> Result<Action> {
//!         match cache::get(&Gvk::new("", "v1", "ConfigMap"), &request.key)? {
//!             Some(_) => info!("{} exists", request.key),
//!             None => info!("{} is gone", request.key),
//!         }
//!         Ok(Action::done())
//!     }
//! }
//!
//! kinformer_sdk::controller!(ConfigMapAuditor);
//! ```

use std::time::Duration;

use crate::bindings::kinformer::plugin0_1_0::types as wit;
use crate::{Gvk, Registration, Result};

/// What a controller implements.
///
/// The host creates one value with [`Controller::init`] and keeps it for the
/// plugin's life; after a restart or a reload `init` runs again and every
/// primary key is reconciled once.
pub trait Controller: Sized + 'static {
    /// Builds the controller from the config string of the plugin's manifest
    /// and says what it reconciles.
    ///
    /// # Errors
    ///
    /// An error refuses to start the controller; the host logs it.
    fn init(config: &str) -> Result<(Self, ControllerRegistration)>;

    /// Reconciles one key: read the primary object (it may be gone) and what
    /// else is needed from the cache, and write what the cluster should become.
    ///
    /// # Errors
    ///
    /// An error makes the host retry the key with exponential backoff.
    fn reconcile(&mut self, request: Request) -> Result<Action>;
}

/// A key to reconcile: one primary object, which may no longer exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The cache key: `namespace/name`, or `name` for cluster-scoped objects.
    pub key: String,
    /// The object's namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl Request {
    #[doc(hidden)]
    pub fn from_wit(request: wit::ReconcileRequest) -> Self {
        Self {
            key: request.key,
            namespace: request.namespace,
            name: request.name,
        }
    }
}

/// What the host does after a successful reconcile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Nothing more: reconcile the key again on its next change (or resync).
    #[must_use]
    pub fn done() -> Self {
        Self::default()
    }

    /// Reconcile the key again after `delay`, even if nothing changes.
    #[must_use]
    pub fn requeue_after(delay: Duration) -> Self {
        Self {
            requeue_after: Some(delay),
        }
    }

    #[doc(hidden)]
    pub fn into_wit(self) -> wit::Action {
        wit::Action {
            requeue_after_ms: self
                .requeue_after
                .map(|delay| u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// What a controller reconciles and reads: its primary resource, the resources
/// it owns, the resources mapped to its keys, and (through [`Registration`])
/// anything else it caches and indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerRegistration {
    base: Registration,
    primary: Gvk,
    owns: Vec<Gvk>,
    maps: Vec<(Gvk, String, String)>,
    resync: Duration,
}

impl ControllerRegistration {
    /// A controller named `name` at `version` reconciling the objects of `primary`.
    #[must_use]
    pub fn new(name: impl Into<String>, version: impl Into<String>, primary: Gvk) -> Self {
        Self {
            base: Registration::new(name, version),
            primary,
            owns: Vec::new(),
            maps: Vec::new(),
            resync: Duration::ZERO,
        }
    }

    /// A change to an object of `gvk` whose controller owner is a primary
    /// object enqueues that owner.
    #[must_use]
    pub fn owns(mut self, gvk: Gvk) -> Self {
        self.owns.push(gvk);
        self
    }

    /// A change to an object of `gvk` enqueues the primary objects of its
    /// namespace whose index `index` (declared with [`Self::index`], or built
    /// in) holds a value found at `field_path` in the object.
    #[must_use]
    pub fn maps(mut self, gvk: Gvk, index: impl Into<String>, field_path: impl Into<String>) -> Self {
        self.maps.push((gvk, index.into(), field_path.into()));
        self
    }

    /// Also keeps `gvk` cached for queries (its changes enqueue nothing).
    #[must_use]
    pub fn cache(mut self, gvk: Gvk) -> Self {
        self.base = self.base.cache(gvk);
        self
    }

    /// Adds an index `name` on the cache of `gvk` over the values at `field_path`.
    #[must_use]
    pub fn index(mut self, gvk: Gvk, name: impl Into<String>, field_path: impl Into<String>) -> Self {
        self.base = self.base.index(gvk, name, field_path);
        self
    }

    /// Enqueues every primary key each `period` (whole seconds; zero for never).
    #[must_use]
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = period;
        self
    }

    #[doc(hidden)]
    pub fn into_wit(self) -> wit::ControllerRegistration {
        wit::ControllerRegistration {
            base: self.base.into_wit(),
            primary: self.primary.to_wit(),
            owns: self.owns.iter().map(Gvk::to_wit).collect(),
            maps: self
                .maps
                .into_iter()
                .map(|(gvk, index, field_path)| wit::KeyMapping {
                    gvk: gvk.to_wit(),
                    index,
                    field_path,
                })
                .collect(),
            resync_seconds: u32::try_from(self.resync.as_secs()).unwrap_or(u32::MAX),
        }
    }
}

/// Exports a [`Controller`] as the plugin's implementation of the kinformer
/// `controller` world.
///
/// Use it once, at the crate root of a `cdylib` crate built for `wasm32-wasip2`.
#[macro_export]
macro_rules! controller {
    ($controller:ty) => {
        // The exports are `unsafe extern "C"` functions generated by wit-bindgen.
        #[allow(unsafe_code)]
        const _: () = {
            struct __KinformerController;

            ::std::thread_local! {
                static __KINFORMER_CONTROLLER: ::std::cell::RefCell<::std::option::Option<$controller>> =
                    const { ::std::cell::RefCell::new(::std::option::Option::None) };
            }

            impl $crate::controller_bindings::Guest for __KinformerController {
                fn init(
                    config: ::std::string::String,
                ) -> ::std::result::Result<
                    $crate::bindings::kinformer::plugin0_1_0::types::ControllerRegistration,
                    $crate::bindings::kinformer::plugin0_1_0::types::Error,
                > {
                    let (controller, registration) =
                        <$controller as $crate::controller::Controller>::init(&config)
                            .map_err($crate::Error::into_wit)?;
                    __KINFORMER_CONTROLLER.with_borrow_mut(|slot| *slot = ::std::option::Option::Some(controller));
                    ::std::result::Result::Ok(registration.into_wit())
                }

                fn reconcile(
                    request: $crate::bindings::kinformer::plugin0_1_0::types::ReconcileRequest,
                ) -> ::std::result::Result<
                    $crate::bindings::kinformer::plugin0_1_0::types::Action,
                    $crate::bindings::kinformer::plugin0_1_0::types::Error,
                > {
                    __KINFORMER_CONTROLLER.with_borrow_mut(|slot| match slot {
                        ::std::option::Option::Some(controller) => $crate::controller::Controller::reconcile(
                            controller,
                            $crate::controller::Request::from_wit(request),
                        )
                        .map($crate::controller::Action::into_wit)
                        .map_err($crate::Error::into_wit),
                        ::std::option::Option::None => ::std::result::Result::Err(
                            $crate::Error::msg("reconcile called before a successful init").into_wit(),
                        ),
                    })
                }
            }

            $crate::controller_bindings::export_controller_world!(__KinformerController with_types_in $crate::controller_bindings);
        };
    };
}
