//! client-go's `tools/cache` for kube-rs: the informer machinery kinformer
//! delivers to its plugins, with no plugin in it.
//!
//! The data path is client-go's: a [`reflector`] lists and watches one
//! resource, its changes become [`delta::Delta`]s, the [`indexer`] caches the
//! objects ([`object`]) under named indexes ([`index`]), and the shared
//! [`processor`] hands each delta to every listener, each with a bounded
//! queue of its own. A [`informer::SharedInformerFactory`] shares one
//! informer per resource and [`scope`] between every subscriber. Beside it:
//! client-go's [`workqueue`] for controllers, the [`retry`] back-off, the
//! token bucket of every rate ([`rate`]), and Lease-based [`leader`]
//! election.
//!
//! # Where to start
//!
//! [`informer::SharedInformerFactory::new`] with a [`kube::Client`], then
//! [`informer::SharedInformerFactory::informer`] for a resource: its
//! [`cache`](informer::SharedIndexInformer::cache) and
//! [`add_listener`](informer::SharedIndexInformer::add_listener).

#![warn(missing_docs)]

/// Kubernetes label selectors.
pub use kinformer_selector as selector;

pub mod caches;
pub mod delta;
pub mod index;
pub mod indexer;
pub mod informer;
pub mod leader;
pub mod object;
pub mod processor;
pub mod rate;
pub mod reflector;
pub mod retry;
pub mod scope;
pub mod workqueue;

/// An error and its sources on one line: each source that its parent's message
/// does not already include, joined by `: `, with whitespace (wasmtime's
/// multi-line backtraces) collapsed.
#[must_use]
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub use kinformer_contract::{StableHasher, stable_hash};

/// Takes the data of a lock whose holder panicked as it is. Every holder of
/// the locks here leaves their data whole before anything that may panic, so
/// a poisoned lock guards consistent data; refusing it would turn one
/// panicking thread into a host that stops.
pub trait Recover<G> {
    /// The guard, poisoned or not.
    fn recover(self) -> G;
}

impl<G> Recover<G> for std::sync::LockResult<G> {
    fn recover(self) -> G {
        self.unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_gives_its_data() {
        let lock = std::sync::Arc::new(std::sync::Mutex::new(7));
        let held = std::sync::Arc::clone(&lock);
        let _ = std::thread::spawn(move || {
            let _guard = held.lock().recover();
            panic!("poisons the lock");
        })
        .join();
        assert!(lock.is_poisoned());
        assert_eq!(*lock.lock().recover(), 7);
    }
}
