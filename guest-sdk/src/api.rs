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

use serde_json::Value;

use crate::Gvk;
use crate::bindings::kinformer::plugin0_1_0::api as wit;
use crate::error::error_kinds;

error_kinds! {
    /// Why a read was not answered.
    ReadError, shown as "read", from wit::ReadError {
        /// Outside the plugin's read grant: nothing was sent.
        Denied = "denied",
        /// The API server refused it (its RBAC).
        Forbidden = "forbidden",
        /// The request was malformed, or the server does not serve the type.
        Invalid = "invalid",
        /// Over the plugin's read rate, or the server asked to slow down.
        Throttled = "throttled",
        /// The server could not be reached in time, or failed; an aggregated API
        /// that is down (metrics-server) answers so.
        Unavailable = "unavailable",
        /// The answer is over the plugin's `query-bytes`.
        TooLarge = "too-large",
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
