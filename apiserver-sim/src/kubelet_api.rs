//! What kube-apiserver hands to a kubelet — pod logs, exec, attach, port-forward, node proxy — answered as when no kubelet can be reached.
//!
//! The emulation runs no kubelet. The API server checks what it can check
//! itself, as kube-apiserver does (the pod, its container, its node, the
//! node's address), then answers what it answers when the kubelet refuses
//! the connection: `500` with the dial error. A pod on no node has no logs
//! yet (an empty `200`), and cannot be exec'd, attached or forwarded to (400).

use std::collections::HashMap;

use serde_json::Value;

use crate::resources::ids;
use crate::status::{ApiError, Result};
use crate::store::Store;

/// The address types kube-apiserver tries, in order, to reach a kubelet (its
/// default `--kubelet-preferred-address-types`).
const PREFERRED_ADDRESS_TYPES: [&str; 5] = ["Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP"];
/// The kubelet's port when the node reports none.
const KUBELET_PORT: u64 = 10250;

/// What a request to a kubelet-served subresource is answered, when it is
/// not an error.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// An empty `text/plain` body: the logs of a pod on no node yet.
    NoLogs,
}

/// Answers `pods/{log,exec,attach,portforward}` of `namespace/name`.
///
/// # Errors
///
/// 404 for a missing pod or node; 400 for a missing or unknown container, or
/// a pod on no node (except for logs); 500 with the error kube-apiserver
/// reports when the kubelet cannot be reached.
pub(crate) fn pod(
    store: &Store,
    namespace: &str,
    name: &str,
    subresource: &str,
    query: &HashMap<String, String>,
) -> Result<Answer> {
    let pod = store.get(&ids::pods(), Some(namespace), name)?;
    let container = if subresource == "portforward" {
        None
    } else {
        Some(container(&pod.value, name, query.get("container").map(String::as_str))?)
    };
    let Some(node) = pod.value["spec"]["nodeName"].as_str().filter(|node| !node.is_empty()) else {
        return match subresource {
            "log" => Ok(Answer::NoLogs),
            _ => Err(ApiError::bad_request(format!(
                "pod {name} does not have a host assigned"
            ))),
        };
    };
    let address = kubelet_address(store, node)?;
    let refused = format!("dial tcp {address}: connect: connection refused");
    match (subresource, container) {
        ("log", Some(container)) => Err(ApiError::unreachable(format!(
            "Get \"https://{address}/containerLogs/{namespace}/{name}/{container}\": {refused}"
        ))),
        _ => Err(ApiError::unreachable(format!("error dialing backend: {refused}"))),
    }
}

/// Answers `nodes/{name}/proxy/...`.
///
/// # Errors
///
/// 404 for a missing node, 500 for a node without an address or whose
/// kubelet cannot be reached.
pub(crate) fn node_proxy(store: &Store, name: &str) -> Result<Answer> {
    let address = kubelet_address(store, name)?;
    Err(ApiError::unreachable(format!(
        "dial tcp {address}: connect: connection refused"
    )))
}

/// The container a request names, or the pod's only one.
fn container<'a>(pod: &'a Value, name: &str, asked: Option<&str>) -> Result<&'a str> {
    let names: Vec<&str> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|field| pod["spec"][field].as_array().into_iter().flatten())
        .filter_map(|container| container["name"].as_str())
        .collect();
    match asked {
        Some(asked) => names
            .iter()
            .find(|known| **known == asked)
            .copied()
            .ok_or_else(|| ApiError::bad_request(format!("container {asked} is not valid for pod {name}"))),
        None => {
            let main: Vec<&str> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|container| container["name"].as_str())
                .collect();
            match main[..] {
                [only] => Ok(only),
                _ => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    main.join(" ")
                ))),
            }
        }
    }
}

/// `host:port` of the node's kubelet, as kube-apiserver picks it.
fn kubelet_address(store: &Store, node: &str) -> Result<String> {
    let node = store.get(&ids::nodes(), None, node)?;
    let status = &node.value["status"];
    let addresses = status["addresses"].as_array().map(Vec::as_slice).unwrap_or_default();
    let host = PREFERRED_ADDRESS_TYPES
        .iter()
        .find_map(|kind| {
            addresses
                .iter()
                .find(|address| address["type"] == *kind)
                .and_then(|address| address["address"].as_str())
        })
        .ok_or_else(|| {
            let known: Vec<String> = addresses
                .iter()
                .map(|address| {
                    format!(
                        "{{{} {}}}",
                        address["type"].as_str().unwrap_or_default(),
                        address["address"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            ApiError::unreachable(format!(
                "no preferred addresses found; known addresses: [{}]",
                known.join(" ")
            ))
        })?;
    let port = status["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .filter(|port| *port != 0)
        .unwrap_or(KUBELET_PORT);
    Ok(format!("{host}:{port}"))
}
