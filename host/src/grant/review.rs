//! The one review of a plugin's registration against its grant: which
//! subscriptions and indexes it gets, which are refused, and why.

use std::fmt;

use kube::api::GroupVersionKind;

use super::Grant;
use crate::index::{LABEL_INDEX_PREFIX, NAMESPACE_INDEX, OWNER_INDEX, check_definition};
use crate::registration::{ControllerSpec, IndexSpec, Registration, Subscription};
use crate::selector::Selector;

/// What a grant makes of a registration: what the plugin gets, and what it is
/// refused and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Review {
    /// The subscriptions the plugin gets, in registration order.
    pub subscriptions: Vec<Subscription>,
    /// The indexes it gets, each on the cache of an accepted subscription.
    pub indexes: Vec<IndexSpec>,
    /// For a controller: its spec, without the owned and mapped resources it
    /// does not get; `None` when its primary resource is refused (it cannot
    /// run) or for a plugin that handles deltas.
    pub controller: Option<ControllerSpec>,
    /// What it asked for and does not get.
    pub refused: Vec<Refusal>,
}

impl Review {
    /// Why what the plugin gets is over its limits, if it is: more
    /// subscriptions than `limits.max-subscriptions` or more indexes than
    /// `limits.max-indexes`. Such a plugin does not start.
    #[must_use]
    pub fn over_limits(&self, limits: &crate::limits::Limits) -> Option<String> {
        if self.subscriptions.len() > limits.max_subscriptions {
            return Some(format!(
                "{} subscriptions, over the limit of {} (limits.max-subscriptions)",
                self.subscriptions.len(),
                limits.max_subscriptions
            ));
        }
        if self.indexes.len() > limits.max_indexes {
            return Some(format!(
                "{} indexes, over the limit of {} (limits.max-indexes)",
                self.indexes.len(),
                limits.max_indexes
            ));
        }
        None
    }

    /// True when the plugin gets no delta at all: it is no controller and
    /// none of the subscriptions it gets delivers (it named none, or its
    /// grant refused them). It runs, and handles nothing.
    #[must_use]
    pub fn handles_nothing(&self) -> bool {
        self.controller.is_none() && !self.subscriptions.iter().any(|subscription| subscription.deliver)
    }
}

/// A subscription or index a plugin asked for and does not get.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// What was asked for: `v1 Pod`, `v1 Pod in namespace a`, `index node on v1 Pod`.
    pub what: String,
    /// Why it is refused.
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Both may hold what the plugin registered: kinds, namespaces, names.
        let (what, reason) = (
            crate::text::sanitize(&self.what, 512),
            crate::text::sanitize(&self.reason, 512),
        );
        write!(f, "{what}: {reason}")
    }
}

impl Review {
    /// A controller's spec as far as the accepted subscriptions and indexes
    /// allow: owned and mapped resources must be accepted, a mapping's index
    /// must exist on the primary's cache.
    fn controller_spec(&mut self, spec: &ControllerSpec) -> Option<ControllerSpec> {
        let accepted = |gvk: &GroupVersionKind| self.subscriptions.iter().any(|subscription| subscription.gvk == *gvk);
        if !accepted(&spec.primary) {
            self.refused.push(Refusal {
                what: format!("controller of {}", resource(&spec.primary)),
                reason: "the primary resource is not granted".to_owned(),
            });
            return None;
        }
        let mut granted = spec.clone();
        granted.owns.retain(|gvk| accepted(gvk));
        let mut refused = Vec::new();
        granted.maps.retain(|mapping| {
            let what = format!("mapping of {} by index {}", resource(&mapping.gvk), mapping.index);
            let built_in = mapping.index == NAMESPACE_INDEX
                || mapping.index == OWNER_INDEX
                || mapping.index.starts_with(LABEL_INDEX_PREFIX);
            let declared = self
                .indexes
                .iter()
                .any(|index| index.gvk == spec.primary && index.name == mapping.index);
            let reason = if !accepted(&mapping.gvk) {
                "the resource is not granted"
            } else if !built_in && !declared {
                "no such index on the primary resource"
            } else if crate::index::FieldPath::parse(&mapping.field_path).is_err() {
                "invalid field path"
            } else {
                return true;
            };
            refused.push(Refusal {
                what,
                reason: reason.to_owned(),
            });
            false
        });
        self.refused.extend(refused);
        Some(granted)
    }
}

fn resource(gvk: &GroupVersionKind) -> String {
    format!("{} {}", gvk.api_version(), gvk.kind)
}

impl Grant {
    /// Reviews a registration: a subscription is accepted when its resource and
    /// namespace are granted and its label selector parses; an index when its
    /// definition is valid and its resource is among the accepted subscriptions.
    ///
    /// # Examples
    ///
    /// ```
    /// use kinformer::grant::Grant;
    /// use kinformer::registration::{Registration, Subscription};
    /// use kube::api::GroupVersionKind;
    ///
    /// let grant = Grant::new(["v1/Pod"], ["shop"])?;
    /// let subscription = |kind: &str| Subscription {
    ///     gvk: GroupVersionKind::gvk("", "v1", kind),
    ///     namespace: None,
    ///     label_selector: None,
    ///     deliver: true,
    /// };
    /// let registration = Registration {
    ///     name: "p".into(),
    ///     version: "1".into(),
    ///     subscriptions: vec![subscription("Pod"), subscription("Secret")],
    ///     indexes: Vec::new(),
    ///     controller: None,
    /// };
    /// let review = grant.review(&registration);
    /// assert_eq!(review.subscriptions, [subscription("Pod")]);
    /// assert_eq!(review.refused[0].to_string(), "v1 Secret: not granted");
    /// # Ok::<(), kinformer::grant::GrantError>(())
    /// ```
    #[must_use]
    pub fn review(&self, registration: &Registration) -> Review {
        let mut review = Review::default();
        for subscription in &registration.subscriptions {
            let what = match &subscription.namespace {
                Some(namespace) => format!("{} in namespace {namespace}", resource(&subscription.gvk)),
                None => resource(&subscription.gvk),
            };
            let reason = if !self.allows_resource(&subscription.gvk) {
                Some("not granted".to_owned())
            } else if subscription
                .namespace
                .as_deref()
                .is_some_and(|ns| !self.namespaces.allows(ns))
            {
                Some("namespace not granted".to_owned())
            } else if let Some(Err(error)) = subscription.label_selector.as_deref().map(Selector::parse) {
                Some(error.to_string())
            } else {
                None
            };
            match reason {
                Some(reason) => review.refused.push(Refusal { what, reason }),
                None => review.subscriptions.push(subscription.clone()),
            }
        }
        for index in &registration.indexes {
            let what = format!("index {} on {}", index.name, resource(&index.gvk));
            let reason = if let Err(error) = check_definition(&index.name, &index.field_path) {
                Some(error.to_string())
            } else if !review
                .subscriptions
                .iter()
                .any(|subscription| subscription.gvk == index.gvk)
            {
                Some("the resource is not watched or not granted".to_owned())
            } else {
                None
            };
            match reason {
                Some(reason) => review.refused.push(Refusal { what, reason }),
                None => review.indexes.push(index.clone()),
            }
        }
        if let Some(spec) = &registration.controller {
            review.controller = review.controller_spec(spec);
        }
        review
    }
}
