//! Keeps the API server's addresses in the [`AddressPolicy`] current: the
//! ClusterIPs of the Service `default/kubernetes` and the addresses behind
//! it, from its EndpointSlices. Both are watched, so a control plane whose
//! addresses rotate (a managed cluster's, an HA control plane's as nodes
//! come and go) is refused at its new addresses as soon as the cluster
//! says so.
//!
//! kube-runtime's `watcher` earns its place here: two small watches whose
//! every event is a handful of addresses. Without the RBAC to read them
//! (`kinformer rbac` grants it), the host says so once and refuses the
//! addresses it learned from its kubeconfig only.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource, ResourceExt as _};

use super::{AddressPolicy, ApiSource};

/// The namespace and name of the Service that fronts the API server.
const NAMESPACE: &str = "default";
const SERVICE: &str = "kubernetes";

/// Follows `default/kubernetes` and its EndpointSlices into `policy` until
/// the returned task is aborted.
pub fn follow_api_server(client: Client, policy: AddressPolicy) -> tokio::task::JoinHandle<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client, NAMESPACE);
    let service_policy = policy.clone();
    tokio::spawn(async move {
        let service = follow(
            services,
            watcher::Config::default().fields(&format!("metadata.name={SERVICE}")),
            ApiSource::Service,
            service_policy,
            service_addresses,
        );
        let endpoints = follow(
            slices,
            watcher::Config::default().labels(&format!("kubernetes.io/service-name={SERVICE}")),
            ApiSource::Endpoints,
            policy,
            slice_addresses,
        );
        futures::join!(service, endpoints);
    })
}

/// Watches the objects `api` and `config` select, and sets their addresses
/// as `source`'s after every change.
async fn follow<K>(
    api: Api<K>,
    config: watcher::Config,
    source: ApiSource,
    policy: AddressPolicy,
    addresses: fn(&K) -> Vec<SocketAddr>,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let what = K::kind(&K::DynamicType::default()).into_owned();
    let mut known: BTreeMap<String, Vec<SocketAddr>> = BTreeMap::new();
    let mut building: BTreeMap<String, Vec<SocketAddr>> = BTreeMap::new();
    let mut warned = false;
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    while let Some(event) = events.next().await {
        let changed = match event {
            Ok(watcher::Event::Apply(object)) => {
                known.insert(object.name_any(), addresses(&object));
                true
            }
            Ok(watcher::Event::Delete(object)) => known.remove(&object.name_any()).is_some(),
            Ok(watcher::Event::Init) => {
                building.clear();
                false
            }
            Ok(watcher::Event::InitApply(object)) => {
                building.insert(object.name_any(), addresses(&object));
                false
            }
            Ok(watcher::Event::InitDone) => {
                known = std::mem::take(&mut building);
                true
            }
            Err(error) => {
                if !warned {
                    tracing::warn!(
                        "cannot watch {what} {NAMESPACE}/{SERVICE} ({error}): plugins are refused the API server at the addresses known without it"
                    );
                    warned = true;
                }
                false
            }
        };
        if changed {
            let all: Vec<SocketAddr> = known.values().flatten().copied().collect();
            tracing::debug!(?source, addresses = ?all, "the API server's addresses");
            policy.set_api_server(source, all);
        }
    }
}

/// The Service's ClusterIPs, on each of its ports.
fn service_addresses(service: &Service) -> Vec<SocketAddr> {
    let Some(spec) = &service.spec else { return Vec::new() };
    let ips: Vec<IpAddr> = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let ports: Vec<u16> = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|port| u16::try_from(port.port).ok())
        .collect();
    pairs(&ips, &ports)
}

/// The addresses of a slice's endpoints, on each of its ports.
fn slice_addresses(slice: &EndpointSlice) -> Vec<SocketAddr> {
    let ips: Vec<IpAddr> = slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|endpoint| endpoint.addresses.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let ports: Vec<u16> = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|port| port.port.and_then(|port| u16::try_from(port).ok()))
        .collect();
    pairs(&ips, &ports)
}

/// Every address on every port; on port 443 when no port is given.
fn pairs(ips: &[IpAddr], ports: &[u16]) -> Vec<SocketAddr> {
    let ports = if ports.is_empty() { &[443][..] } else { ports };
    let mut all: Vec<SocketAddr> = ips
        .iter()
        .flat_map(|ip| ports.iter().map(|port| SocketAddr::new(*ip, *port)))
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_gives_every_address_on_every_port() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["172.18.0.2"]}, {"addresses": ["172.18.0.3"]}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        }))
        .unwrap();
        assert_eq!(
            slice_addresses(&slice),
            [
                "172.18.0.2:6443".parse::<SocketAddr>().unwrap(),
                "172.18.0.3:6443".parse().unwrap()
            ]
        );
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1", "fd00::1"], "ports": [{"port": 443}]},
        }))
        .unwrap();
        assert_eq!(
            service_addresses(&service),
            [
                "10.96.0.1:443".parse::<SocketAddr>().unwrap(),
                "[fd00::1]:443".parse().unwrap()
            ]
        );
    }
}
