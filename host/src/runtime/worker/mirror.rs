//! A worker's part in a rollout: following its slot (its role, a rollback),
//! the calls a running version mirrors to its shadow, the shadow's making of
//! them, and the counts both report.

use std::sync::Arc;
use std::time::Duration;

use super::Worker;
use super::delivery::Delivery;
use crate::plugin::SharedInputs;
use crate::rollout::{Call, Role, compare};
use crate::runtime::lifecycle::Event;
use crate::runtime::rollout::{Mirror, MirrorWork};
use crate::runtime::status::update;

/// How long after the running version's call a shadow may still make the
/// same call and have it compared; a shadow further behind skips it.
const MIRROR_STALE: Duration = Duration::from_secs(1);

impl Worker {
    /// Takes the worker's part in a rollout as its slot says now. A next
    /// version that was rolled back stops serving (`RolledBack`); otherwise a
    /// controller queues every primary key, so the keys that changed hands
    /// are reconciled by their new owner (the other version skips them).
    pub(super) fn relink(&mut self) -> Option<Event> {
        let link = self.slot.link();
        if let Some(link) = link.as_ref().filter(|link| link.role == Role::Next) {
            let same = self
                .link
                .as_ref()
                .is_some_and(|old| Arc::ptr_eq(&old.rollout, &link.rollout));
            if !same || self.mirrors.is_none() {
                self.mirrors = link.rollout.take_mirrors().or(self.mirrors.take().filter(|_| same));
            }
        }
        if link.is_none() {
            self.mirrors = None;
        }
        self.link = link;
        if let Some(link) = self.link.as_ref().filter(|link| link.role == Role::Next)
            && let Some(reason) = link.rollout.rolled_back()
        {
            if self.rolled_back {
                return None;
            }
            self.rolled_back = true;
            let digest = self.running.digest().to_owned();
            update(&self.status, |status| {
                status.rollbacks += 1;
                status.rejected_digest = Some(digest);
                status.last_error = Some(format!("rolled back: {reason}"));
            });
            return Some(Event::RolledBack);
        }
        if let Some(keys) = &self.keys {
            keys.enqueue_all();
        }
        None
    }

    /// Makes one call (`handle` of a batch, `reconcile` of a key) as a
    /// rollout wants it: a running version with a shadow mirrors it, and
    /// either version counts how it went.
    pub(super) async fn observed(&mut self, work: MirrorWork) -> Delivery {
        let link = self.link.clone();
        drop(self.running.take_written());
        let mirrored = link
            .as_ref()
            .filter(|link| link.role == Role::Running)
            .and_then(|link| link.rollout.mirror(work.clone(), &self.running.manifest.grant));
        if let Some((_, inputs)) = &mirrored {
            self.share_inputs(Some(SharedInputs::Record(Arc::clone(inputs))));
        }
        let delivery = self.call(&work).await;
        let written = self.running.take_written();
        let refusals = written.iter().filter(|write| !write.is_ok()).count();
        if let Some((sender, inputs)) = mirrored {
            self.share_inputs(None);
            inputs.finish();
            let _ = sender.send(written);
        }
        if let Some(link) = link {
            link.rollout.record(link.role, self.call_kind(&delivery), refusals);
        }
        delivery
    }

    /// A shadow makes the running version's call and compares the writes.
    pub(super) async fn shadow(&mut self, mirror: Mirror) -> Delivery {
        let Some(link) = self.link.clone() else {
            return Delivery::Done;
        };
        if mirror.sent.elapsed() > MIRROR_STALE || self.instance.is_none() {
            link.rollout.skipped();
            return Delivery::Done;
        }
        drop(self.running.take_written());
        // Granted as the running version is, it gets the running version's
        // answers; granted otherwise, it reads for itself.
        if mirror.grant == self.running.manifest.grant {
            self.share_inputs(Some(SharedInputs::Replay(Arc::clone(&mirror.inputs))));
        }
        let delivery = self.call(&mirror.work).await;
        self.share_inputs(None);
        let written = self.running.take_written();
        let refusals = written.iter().filter(|write| !write.is_ok()).count();
        link.rollout.record(Role::Next, self.call_kind(&delivery), refusals);
        let wait = self.running.manifest.limits.call_timeout + self.running.manifest.limits.write_timeout;
        let running = tokio::time::timeout(wait, mirror.running).await;
        match running {
            Ok(Ok(running)) => link.rollout.compared(mirror.work.key(), &compare(&running, &written)),
            _ => link.rollout.skipped(),
        }
        delivery
    }

    /// Shares the inputs of its instance's calls with a shadow, or stops.
    pub(super) fn share_inputs(&mut self, inputs: Option<SharedInputs>) {
        if let Some(instance) = self.instance.as_mut() {
            instance.share_inputs(inputs);
        }
    }

    /// How the last call went, for a rollout's counts.
    pub(super) fn call_kind(&self, delivery: &Delivery) -> Call {
        match (delivery, self.call_failed) {
            (Delivery::Failed, _) => Call::Trap,
            (_, true) => Call::Error,
            (_, false) => Call::Ok,
        }
    }
}
