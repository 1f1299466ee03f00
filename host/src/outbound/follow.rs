//! Keeps the API server's addresses in the [`AddressPolicy`] current: the
//! ClusterIPs of the Service `default/kubernetes` and the addresses behind
//! it, from its EndpointSlices. Both are watched, so a control plane whose
//! addresses rotate (a managed cluster's, an HA control plane's as nodes
//! come and go) is refused at its new addresses as soon as the cluster
//! says so.
//!
//! kube-runtime's `watcher` earns its place here: two small watches whose
//! every event is a handful of addresses. A refused list or watch is tried
//! again with the informers' back-off ([`crate::retry::Backoff`]: 800 ms
//! doubling to 30 s), not kube-runtime's default, which starts over at each
//! attempt and so retries about once a second. Without the RBAC to read them
//! (`kinformer rbac` prints it), the host says so once, at WARN, naming the
//! permission, and refuses the addresses it learned from its kubeconfig
//! only; the retries that follow are logged at DEBUG.

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

/// What one of the two watches reads: the source it sets in the policy, and
/// how the host's log names it.
#[derive(Debug, Clone, Copy)]
struct Watched {
    source: ApiSource,
    /// The objects: "the Service default/kubernetes".
    objects: &'static str,
    /// The addresses they give: "its ClusterIPs".
    addresses: &'static str,
    /// The resource as RBAC names it, with its API group.
    resource: &'static str,
}

const SERVICE_WATCH: Watched = Watched {
    source: ApiSource::Service,
    objects: "the Service default/kubernetes",
    addresses: "its ClusterIPs",
    resource: "services (core)",
};

const SLICES_WATCH: Watched = Watched {
    source: ApiSource::Endpoints,
    objects: "the EndpointSlices of default/kubernetes",
    addresses: "the servers behind it",
    resource: "endpointslices (discovery.k8s.io)",
};

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
            SERVICE_WATCH,
            service_policy,
            service_addresses,
        );
        let endpoints = follow(
            slices,
            watcher::Config::default().labels(&format!("kubernetes.io/service-name={SERVICE}")),
            SLICES_WATCH,
            policy,
            slice_addresses,
        );
        futures::join!(service, endpoints);
    })
}

/// Watches the objects `api` and `config` select, and sets their addresses
/// as `watched`'s source's after every change.
async fn follow<K>(
    api: Api<K>,
    config: watcher::Config,
    watched: Watched,
    policy: AddressPolicy,
    addresses: fn(&K) -> Vec<SocketAddr>,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let backoff = crate::retry::Backoff::default();
    let retry_in = backoff.next_delay();
    let mut events = std::pin::pin!(watcher(api, config).backoff(backoff));
    let mut follower = Follower::new(addresses);
    while let Some(event) = events.next().await {
        match follower.step(event) {
            Step::Quiet => {}
            Step::Learned { addresses, recovered } => {
                if recovered {
                    tracing::info!(
                        "reading {} again: plugins are refused the API server at {} too",
                        watched.objects,
                        watched.addresses
                    );
                }
                tracing::debug!(source = ?watched.source, ?addresses, "the API server's addresses");
                policy.set_api_server(watched.source, addresses);
            }
            Step::Failed {
                failure,
                forbidden: true,
                first: true,
            } => tracing::warn!(
                "cannot read {}: {failure}; without list and watch on {} in namespace {NAMESPACE} \
                 (`kinformer rbac` prints the Role), plugins are refused the API server at the addresses \
                 its kubeconfig names but not at {}; retrying with back-off",
                watched.objects,
                watched.resource,
                watched.addresses
            ),
            Step::Failed {
                failure, first: true, ..
            } => tracing::warn!(
                "cannot read {}: {failure}; plugins are refused the API server at the addresses known so far, \
                 not at {} as they change; retrying with back-off",
                watched.objects,
                watched.addresses
            ),
            Step::Failed { failure, .. } => tracing::debug!(
                "cannot read {}: {failure}; retrying in {:.1} s",
                watched.objects,
                retry_in.get().as_secs_f64()
            ),
        }
    }
}

/// What one event of a watch means for the API server's addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Nothing to change.
    Quiet,
    /// The addresses are now these; `recovered` when the list that gave
    /// them is the first to succeed after a failure.
    Learned {
        addresses: Vec<SocketAddr>,
        recovered: bool,
    },
    /// The list or watch failed (`failure`, one sentence), `forbidden` by
    /// RBAC or not; `first` for the first failure since it last succeeded,
    /// the one the host says at WARN.
    Failed {
        failure: String,
        forbidden: bool,
        first: bool,
    },
}

/// The state of one watch: the addresses of each object it knows, those of
/// the list being read, and whether it is failing.
struct Follower<K> {
    addresses: fn(&K) -> Vec<SocketAddr>,
    known: BTreeMap<String, Vec<SocketAddr>>,
    building: BTreeMap<String, Vec<SocketAddr>>,
    failing: bool,
}

impl<K> Follower<K>
where
    K: Resource,
    K::DynamicType: Default,
{
    fn new(addresses: fn(&K) -> Vec<SocketAddr>) -> Self {
        Self {
            addresses,
            known: BTreeMap::new(),
            building: BTreeMap::new(),
            failing: false,
        }
    }

    /// Takes one event of the watch.
    fn step(&mut self, event: watcher::Result<watcher::Event<K>>) -> Step {
        match event {
            Ok(watcher::Event::Apply(object)) => {
                self.known.insert(object.name_any(), (self.addresses)(&object));
                self.learned(false)
            }
            Ok(watcher::Event::Delete(object)) => match self.known.remove(&object.name_any()) {
                Some(_) => self.learned(false),
                None => Step::Quiet,
            },
            Ok(watcher::Event::Init) => {
                self.building.clear();
                Step::Quiet
            }
            Ok(watcher::Event::InitApply(object)) => {
                self.building.insert(object.name_any(), (self.addresses)(&object));
                Step::Quiet
            }
            Ok(watcher::Event::InitDone) => {
                self.known = std::mem::take(&mut self.building);
                let recovered = std::mem::replace(&mut self.failing, false);
                self.learned(recovered)
            }
            // An expired watch is the watcher's to relist: no failure.
            Err(watcher::Error::WatchError(status)) if status.code == 410 => Step::Quiet,
            Err(error) => Step::Failed {
                failure: crate::retry::describe(&K::kind(&K::DynamicType::default()), &error),
                forbidden: is_forbidden(&error),
                first: !std::mem::replace(&mut self.failing, true),
            },
        }
    }

    fn learned(&self, recovered: bool) -> Step {
        Step::Learned {
            addresses: self.known.values().flatten().copied().collect(),
            recovered,
        }
    }
}

/// True when the server refused the list or watch as RBAC does: `403`.
fn is_forbidden(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status.code == 403,
        _ => false,
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

    fn service(name: &str, ip: &str) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterIP": ip, "ports": [{"port": 443}]},
        }))
        .unwrap()
    }

    fn forbidden() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure(
                "services \"kubernetes\" is forbidden: User \"u\" cannot list resource \"services\"",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        ))
    }

    #[test]
    fn a_refused_watch_is_said_once_until_a_list_succeeds_again() {
        let mut follower = Follower::new(service_addresses);
        let first = follower.step(Err(forbidden()));
        assert!(
            matches!(&first, Step::Failed { failure, forbidden: true, first: true }
                if failure.starts_with("list Service: forbidden (403): services \"kubernetes\" is forbidden")),
            "{first:?}"
        );
        for _ in 0..3 {
            let again = follower.step(Err(forbidden()));
            assert!(matches!(again, Step::Failed { first: false, .. }), "{again:?}");
        }
        assert_eq!(follower.step(Ok(watcher::Event::Init)), Step::Quiet);
        let kubernetes = service("kubernetes", "10.96.0.1");
        assert_eq!(
            follower.step(Ok(watcher::Event::InitApply(kubernetes.clone()))),
            Step::Quiet
        );
        let address: SocketAddr = "10.96.0.1:443".parse().unwrap();
        assert_eq!(
            follower.step(Ok(watcher::Event::InitDone)),
            Step::Learned {
                addresses: vec![address],
                recovered: true
            }
        );
        // An expired watch is relisted without a word; another failure is
        // said again, once.
        let gone = watcher::Error::WatchError(kube::core::Status::failure("gone", "Expired").with_code(410).boxed());
        assert_eq!(follower.step(Err(gone)), Step::Quiet);
        let broken = watcher::Error::WatchFailed(kube::Error::Api(
            kube::core::Status::failure("etcd is down", "InternalError")
                .with_code(500)
                .boxed(),
        ));
        assert!(matches!(
            follower.step(Err(broken)),
            Step::Failed {
                forbidden: false,
                first: true,
                ..
            }
        ));
        assert_eq!(follower.step(Ok(watcher::Event::Init)), Step::Quiet);
        assert_eq!(
            follower.step(Ok(watcher::Event::InitDone)),
            Step::Learned {
                addresses: Vec::new(),
                recovered: true
            }
        );
    }

    #[test]
    fn a_change_or_a_delete_relearns_every_address() {
        let mut follower = Follower::new(service_addresses);
        follower.step(Ok(watcher::Event::Init));
        follower.step(Ok(watcher::Event::InitDone));
        let one = service("a", "10.96.0.1");
        let learned = |addresses: &[&str]| Step::Learned {
            addresses: addresses.iter().map(|address| address.parse().unwrap()).collect(),
            recovered: false,
        };
        assert_eq!(
            follower.step(Ok(watcher::Event::Apply(one.clone()))),
            learned(&["10.96.0.1:443"])
        );
        assert_eq!(
            follower.step(Ok(watcher::Event::Apply(service("b", "10.96.0.2")))),
            learned(&["10.96.0.1:443", "10.96.0.2:443"])
        );
        assert_eq!(
            follower.step(Ok(watcher::Event::Delete(one.clone()))),
            learned(&["10.96.0.2:443"])
        );
        assert_eq!(follower.step(Ok(watcher::Event::Delete(one))), Step::Quiet);
    }

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
