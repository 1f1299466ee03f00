//! Read straight from the API server, uncached, within the operator's read
//! grant (`[[grant.read]]` in the manifest; none by default).
//!
//! For resources no informer can serve, above all the metrics API
//! (`metrics.k8s.io`: metrics-server answers get and list, never watch). Each
//! call is a request to the API server: slower than [`cache`](crate::cache),
//! counted against the plugin's read rate, and bounded by its `query-bytes`.
//!
//! # Examples
//!
//! ```no_run
//! use kinformer_sdk::{api, Gvk};
//!
//! # fn run() -> kinformer_sdk::Result<()> {
//! let pod_metrics = Gvk::new("metrics.k8s.io", "v1beta1", "PodMetrics");
//! // Needs `[[grant.read]] resources = ["metrics.k8s.io/v1beta1/PodMetrics"]`.
//! for metrics in api::list(&pod_metrics, Some("shop"), Some("app=web"))? {
//!     kinformer_sdk::info!("{}", metrics["metadata"]["name"]);
//! }
//! # Ok(()) }
//! ```

use std::fmt;

use serde_json::Value;

use crate::Gvk;
use crate::bindings::kinformer::plugin0_1_0::api as wit;

/// Why a read was not answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// Outside the plugin's read grant: nothing was sent.
    Denied(String),
    /// The API server refused it (its RBAC).
    Forbidden(String),
    /// The request was malformed, or the server does not serve the type.
    Invalid(String),
    /// Over the plugin's read rate, or the server asked to slow down.
    Throttled(String),
    /// The server could not be reached in time, or failed; an aggregated API
    /// that is down (metrics-server) answers so.
    Unavailable(String),
    /// The answer is over the plugin's `query-bytes`.
    TooLarge(String),
}

impl ReadError {
    /// What went wrong.
    #[must_use]
    pub fn message(&self) -> &str {
        match self {
            Self::Denied(message)
            | Self::Forbidden(message)
            | Self::Invalid(message)
            | Self::Throttled(message)
            | Self::Unavailable(message)
            | Self::TooLarge(message) => message,
        }
    }

    /// The kind of error as the host names it: `denied`, `unavailable`, ...
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Denied(_) => "denied",
            Self::Forbidden(_) => "forbidden",
            Self::Invalid(_) => "invalid",
            Self::Throttled(_) => "throttled",
            Self::Unavailable(_) => "unavailable",
            Self::TooLarge(_) => "too-large",
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "read {}: {}", self.kind(), self.message())
    }
}

impl std::error::Error for ReadError {}

impl From<wit::ReadError> for ReadError {
    fn from(error: wit::ReadError) -> Self {
        match error {
            wit::ReadError::Denied(message) => Self::Denied(message),
            wit::ReadError::Forbidden(message) => Self::Forbidden(message),
            wit::ReadError::Invalid(message) => Self::Invalid(message),
            wit::ReadError::Throttled(message) => Self::Throttled(message),
            wit::ReadError::Unavailable(message) => Self::Unavailable(message),
            wit::ReadError::TooLarge(message) => Self::TooLarge(message),
        }
    }
}

/// The object `name` in `namespace` (`None` for a cluster-scoped type);
/// `None` when it does not exist.
///
/// # Errors
///
/// See [`ReadError`].
pub fn get(gvk: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<Value>, ReadError> {
    #[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
    return crate::testing::api_get(gvk, namespace, name);
    #[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
    {
        let text = wit::get(&gvk.to_wit(), namespace, name)?;
        text.map(|text| parse(&text)).transpose()
    }
}

/// The objects in `namespace` (every namespace when `None`) matching a label
/// selector, as the server answers them.
///
/// # Errors
///
/// See [`ReadError`].
pub fn list(gvk: &Gvk, namespace: Option<&str>, label_selector: Option<&str>) -> Result<Vec<Value>, ReadError> {
    #[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
    return crate::testing::api_list(gvk, namespace, label_selector);
    #[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
    {
        let text = wit::list(&gvk.to_wit(), namespace, label_selector, 0)?;
        let mut list = parse(&text)?;
        match list.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => Ok(items),
            _ => Ok(Vec::new()),
        }
    }
}

#[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
fn parse(text: &str) -> Result<Value, ReadError> {
    serde_json::from_str(text).map_err(|error| ReadError::Invalid(format!("the answer is not JSON: {error}")))
}
