//! Preparing a plugin once its `init` ran: its registration reviewed against
//! its grant, then wired to caches. The one path that the runtime (live
//! informers), `kinformer replay` (a recording) and `kinformer check` (empty
//! caches) share, so that what a plugin is given cannot differ between them.

use std::collections::HashMap;

use kube::api::GroupVersionKind;

use crate::caches::Caches;
use crate::grant::{Grant, Review};
use crate::index::IndexError;
use crate::indexer::{IndexLease, Indexer};
use crate::limits::Limits;
use crate::registration::{ControllerSpec, Registration, Subscription};

/// Why a plugin's registration cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// It asks for more subscriptions or indexes than its limits allow.
    #[error("{0}")]
    OverLimits(String),
    /// An index it declared cannot be made.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// It is a controller whose primary resource its grant refuses.
    #[error("the primary resource {api_version} {kind} is not granted")]
    PrimaryNotGranted {
        /// The primary resource's apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
}

/// The review of `registration` against `grant`, logged refusal by
/// refusal, unless what it gets is over `limits`.
///
/// # Errors
///
/// [`PrepareError::OverLimits`] when it asks for more subscriptions or
/// indexes than `limits` allow: such a plugin does not start.
pub fn review(
    plugin: &str,
    grant: &Grant,
    registration: &Registration,
    limits: &Limits,
) -> Result<Review, PrepareError> {
    let review = grant.review(registration);
    for refusal in &review.refused {
        tracing::warn!(plugin = %plugin, %refusal, "registration refused in part");
    }
    match review.over_limits(limits) {
        Some(reason) => Err(PrepareError::OverLimits(reason)),
        None => Ok(review),
    }
}

/// What wiring a registration to its caches holds for the plugin.
#[derive(Debug)]
#[non_exhaustive]
pub struct Wiring {
    /// Its indexes, held while the plugin lives: dropped with it when no
    /// other plugin holds them.
    pub indexes: Vec<IndexLease>,
    /// For a controller: what it reconciles, and its primary objects as its
    /// grant lets it see them.
    pub controller: Option<(ControllerSpec, Indexer)>,
}

/// Wires a reviewed registration to the caches the plugin queries
/// (`caches`, by resource type): each subscription's cache from `cache_of`,
/// given its position in the review (the first subscription of a resource
/// type serves its queries), each declared index leased on the cache of its resource type
/// under the plugin's own name for it (another plugin's index of the same
/// name is another index), and a controller's primary cache seen through
/// `grant`'s namespaces.
///
/// # Errors
///
/// When an index cannot be made, or a controller's primary resource is not
/// granted.
pub fn wire(
    registration: &Registration,
    review: &Review,
    grant: &Grant,
    caches: &Caches,
    mut cache_of: impl FnMut(usize, &Subscription) -> Indexer,
) -> Result<Wiring, PrepareError> {
    let mut served: Vec<(GroupVersionKind, Indexer)> = Vec::new();
    for (position, subscription) in review.subscriptions.iter().enumerate() {
        if !served.iter().any(|(gvk, _)| *gvk == subscription.gvk) {
            served.push((subscription.gvk.clone(), cache_of(position, subscription)));
        }
    }
    let mut aliases: HashMap<GroupVersionKind, HashMap<String, String>> = HashMap::new();
    let mut indexes = Vec::new();
    for index in &review.indexes {
        if let Some((_, cache)) = served.iter().find(|(gvk, _)| *gvk == index.gvk) {
            let lease = cache.lease_index(&index.field_path)?;
            aliases
                .entry(index.gvk.clone())
                .or_default()
                .insert(index.name.clone(), lease.name().to_owned());
            indexes.push(lease);
        }
    }
    for (gvk, cache) in &served {
        caches.insert(
            gvk.clone(),
            cache.aliased(aliases.get(gvk).cloned().unwrap_or_default()),
        );
    }
    let controller = match (&registration.controller, &review.controller) {
        (None, _) => None,
        (Some(spec), None) => {
            return Err(PrepareError::PrimaryNotGranted {
                api_version: spec.primary.api_version(),
                kind: spec.primary.kind.clone(),
            });
        }
        (Some(_), Some(spec)) => caches
            .get(&spec.primary)
            .map(|primary| (spec.clone(), primary.scoped(grant.namespaces()))),
    };
    Ok(Wiring { indexes, controller })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indexer::indexer;
    use crate::registration::IndexSpec;

    fn pods() -> GroupVersionKind {
        GroupVersionKind::gvk("", "v1", "Pod")
    }

    fn watching(gvks: &[GroupVersionKind]) -> Registration {
        let mut registration = Registration {
            name: "p".into(),
            version: "1".into(),
            subscriptions: Vec::new(),
            indexes: Vec::new(),
            controller: None,
        };
        for gvk in gvks {
            registration.subscriptions.push(Subscription {
                gvk: gvk.clone(),
                namespace: None,
                label_selector: None,
                deliver: true,
            });
        }
        registration
    }

    #[test]
    fn each_resource_type_is_served_by_its_first_subscription_and_indexes_by_the_plugin_s_names() {
        let mut registration = watching(&[pods(), pods()]);
        registration.subscriptions[1].namespace = Some("shop".into());
        registration.indexes.push(IndexSpec {
            gvk: pods(),
            name: "node".into(),
            field_path: "spec.nodeName".into(),
        });
        let grant = Grant::default();
        let review = review("p", &grant, &registration, &Limits::default()).expect("within limits");
        let mut asked = 0;
        let (reader, _writer) = indexer();
        let caches = Caches::new();
        let wiring = wire(&registration, &review, &grant, &caches, |position, _| {
            asked += 1;
            assert_eq!(position, 0, "the first subscription of a type serves it");
            reader.clone()
        })
        .expect("wired");
        assert_eq!(asked, 1, "one cache per resource type");
        assert_eq!(wiring.indexes.len(), 1);
        let cache = caches.get(&pods()).expect("pods are cached");
        assert!(
            cache.by_index("node", "node-1", 0).is_ok(),
            "the plugin's name for its index works"
        );
        assert!(wiring.controller.is_none());
    }

    #[test]
    fn a_registration_over_its_limits_is_refused_before_any_cache_is_made() {
        let registration = watching(&[pods(), GroupVersionKind::gvk("apps", "v1", "Deployment")]);
        let limits = Limits {
            max_subscriptions: 1,
            ..Limits::default()
        };
        let refused = review("p", &Grant::default(), &registration, &limits).expect_err("over the limit");
        assert!(refused.to_string().contains("limits.max-subscriptions"), "{refused}");
    }
}
