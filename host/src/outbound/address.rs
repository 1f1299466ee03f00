//! Which addresses a plugin's request may connect to, and IP literals in every
//! spelling a URL parser accepts.
//!
//! A tenant who may reach `hooks.example.com` must not reach the cloud's
//! metadata service, the host itself, the API server or the cluster's private
//! network by naming them some other way: by a DNS name that resolves to them,
//! or by an IP literal written in decimal (`2130706433`), hex (`0x7f.1`),
//! octal (`0177.0.0.1`), as an IPv4-mapped IPv6 address
//! (`[::ffff:127.0.0.1]`), or wrapped in NAT64, 6to4 or Teredo. [`ip_literal`]
//! reads every such spelling as the address it means, and
//! [`AddressPolicy::check`] is the one decision about an address, made for
//! every address a name resolves to, before the host connects to the one it
//! checked.
//!
//! The decision, in order (the first that applies):
//!
//! | address | answer |
//! | --- | --- |
//! | unspecified (`0.0.0.0/8`, `::`) | refused: a connect to it reaches this machine |
//! | a cloud's metadata service ([`METADATA`]) | refused |
//! | the API server: any address it has, on every port; on a loopback or host address, its port | refused |
//! | the host: an address of its own interfaces, or a port it serves on | refused |
//! | broadcast, multicast, `240.0.0.0/4` | refused: no HTTP server lives there |
//! | loopback, link-local, private (RFC 1918, `100.64.0.0/10`, `fc00::/7`) | refused unless a network of the plugin's grant contains it |
//! | anything else | allowed |
//!
//! An address that embeds an IPv4 address (NAT64, 6to4, Teredo) is refused
//! when the IPv4 address it carries would be.

use kinformer_informers::Recover as _;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, RwLock};

pub use ipnet::IpNet;

/// Why an address was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Forbidden {
    /// `0.0.0.0/8` or `::`: a connect to it reaches this machine.
    Unspecified,
    /// A cloud's metadata or credentials service ([`METADATA`]).
    Metadata,
    /// The API server, at one of its addresses: plugins reach it through the
    /// host, under their grant.
    ApiServer,
    /// The host itself: one of its interfaces' addresses, or a port it serves
    /// on (its status endpoint).
    Host,
    /// Broadcast, multicast or reserved: no HTTP server lives there.
    Unroutable,
    /// Loopback (`127.0.0.0/8`, `::1`) that no network of the grant opens.
    Loopback,
    /// Link-local (`169.254.0.0/16`, `fe80::/10`) that no network of the grant
    /// opens.
    LinkLocal,
    /// A private network (`10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`,
    /// `100.64.0.0/10`, `fc00::/7`) that no network of the grant opens.
    Private,
}

impl Forbidden {
    /// What the address is, as a refusal says it.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unspecified => "an unspecified address (this machine)",
            Self::Metadata => "a cloud metadata service",
            Self::ApiServer => "the API server",
            Self::Host => "the host itself",
            Self::Unroutable => "a broadcast, multicast or reserved address",
            Self::Loopback => "a loopback address no network of the grant opens",
            Self::LinkLocal => "a link-local address no network of the grant opens",
            Self::Private => "a private address no network of the grant opens",
        }
    }

    /// True when a network of the grant can open the address.
    #[must_use]
    pub fn can_be_opened(self) -> bool {
        matches!(self, Self::Loopback | Self::LinkLocal | Self::Private)
    }
}

/// The metadata and credentials services of the clouds Kubernetes runs on:
/// refused whatever a grant opens. Link-local addresses are refused unless a
/// grant opens them; these, never.
///
/// - AWS: IMDS `169.254.169.254` and `fd00:ec2::254`; its DNS, NTP and
///   ECS/EKS credential agents `169.254.169.253`, `fd00:ec2::253`,
///   `169.254.169.123`, `fd00:ec2::123`, `169.254.170.2`, `169.254.170.23`
///   and `fd00:ec2::23`.
/// - Google Cloud: `169.254.169.254` and `fd20:ce::254`.
/// - Azure: IMDS `169.254.169.254` and the WireServer `168.63.129.16`.
/// - Alibaba Cloud: `100.100.100.200`.
/// - Oracle Cloud: `169.254.169.254` and `192.0.0.192`.
/// - OpenStack: `169.254.169.254` and `fe80::a9fe:a9fe`.
/// - Tencent Cloud: `169.254.0.23`.
pub const METADATA: &[IpAddr] = &[
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 253)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 123)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 23)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 0, 23)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(Ipv4Addr::new(192, 0, 0, 192)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23)),
    IpAddr::V6(Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0xa9fe, 0xa9fe)),
];

/// Where the host learned an address of the API server. Each source's
/// addresses are replaced as a whole when it learns again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ApiSource {
    /// The kubeconfig's (or the pod's `KUBERNETES_SERVICE_*`) server.
    Config,
    /// The ClusterIP of the Service `default/kubernetes`.
    Service,
    /// The EndpointSlices of `default/kubernetes`: the servers behind it.
    Endpoints,
}

/// The addresses the host refuses every plugin, whatever its grant: the API
/// server's and the host's own. Learned as the host starts and kept current
/// as they change (the `default/kubernetes` EndpointSlices are watched); a
/// clone shares them. Reads are a lock and a few comparisons.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    known: Arc<RwLock<Known>>,
}

#[derive(Debug, Default)]
struct Known {
    api_server: std::collections::BTreeMap<ApiSource, Vec<SocketAddr>>,
    /// The host's interface addresses, loopback left out.
    host: BTreeSet<IpAddr>,
    /// Ports the host serves on, on any of its addresses.
    host_ports: BTreeSet<u16>,
}

impl AddressPolicy {
    /// A policy that also refuses these addresses of the API server.
    #[must_use]
    pub fn new(api_server: impl IntoIterator<Item = SocketAddr>) -> Self {
        let policy = Self::default();
        policy.set_api_server(ApiSource::Config, api_server);
        policy
    }

    /// Replaces what `source` says the API server's addresses are.
    pub fn set_api_server(&self, source: ApiSource, addresses: impl IntoIterator<Item = SocketAddr>) {
        let addresses = addresses
            .into_iter()
            .map(|address| SocketAddr::new(canonical(address.ip()), address.port()))
            .collect();
        self.write().api_server.insert(source, addresses);
    }

    /// Replaces the host's own interface addresses (loopback is left out: it
    /// is refused as loopback, and its ports as the host's).
    pub fn set_host_addresses(&self, addresses: impl IntoIterator<Item = IpAddr>) {
        self.write().host = addresses
            .into_iter()
            .map(canonical)
            .filter(|ip| !ip.is_loopback())
            .collect();
    }

    /// Adds a port the host serves on (its status endpoint): refused on every
    /// address of the host.
    pub fn add_host_port(&self, port: u16) {
        self.write().host_ports.insert(port);
    }

    /// The API server's addresses, from every source.
    #[must_use]
    pub fn api_server(&self) -> Vec<SocketAddr> {
        let known = self.read();
        known.api_server.values().flatten().copied().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known.read().recover()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Known> {
        self.known.write().recover()
    }

    /// Whether `address` may be connected to by a plugin whose grant opens
    /// `networks`.
    ///
    /// # Errors
    ///
    /// Why the address is refused.
    pub fn check(&self, address: SocketAddr, networks: &[IpNet]) -> Result<(), Forbidden> {
        let ip = canonical(address.ip());
        let port = address.port();
        // A wrapped IPv4 address is checked as itself too.
        for embedded in embedded_v4(ip) {
            self.check_one(IpAddr::V4(embedded), port, networks)?;
        }
        self.check_one(ip, port, networks)
    }

    fn check_one(&self, ip: IpAddr, port: u16, networks: &[IpNet]) -> Result<(), Forbidden> {
        if is_unspecified(ip) {
            return Err(Forbidden::Unspecified);
        }
        if METADATA.contains(&ip) {
            return Err(Forbidden::Metadata);
        }
        {
            let known = self.read();
            let local = ip.is_loopback() || known.host.contains(&ip);
            for api in known.api_server.values().flatten() {
                let api_local = api.ip().is_loopback() || known.host.contains(&api.ip());
                // A server elsewhere is refused on every port; one on this
                // machine (a local cluster, a control-plane node) by its
                // port on every address of the machine, since it may listen
                // on all of them.
                if (api.ip() == ip && !api_local) || (local && api_local && api.port() == port) {
                    return Err(Forbidden::ApiServer);
                }
            }
            if known.host.contains(&ip) || (local && known.host_ports.contains(&port)) {
                return Err(Forbidden::Host);
            }
        }
        let forbidden = match classify(ip) {
            None => return Ok(()),
            Some(forbidden) => forbidden,
        };
        if forbidden.can_be_opened() && networks.iter().any(|network| network.contains(&ip)) {
            return Ok(());
        }
        Err(forbidden)
    }
}

fn is_unspecified(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.octets()[0] == 0,
        IpAddr::V6(v6) => v6.is_unspecified(),
    }
}

/// The class of an address refused by default, `None` for one allowed.
fn classify(ip: IpAddr) -> Option<Forbidden> {
    match ip {
        IpAddr::V4(v4) => {
            let [first, second, ..] = v4.octets();
            if v4.is_loopback() {
                Some(Forbidden::Loopback)
            } else if v4.is_link_local() {
                Some(Forbidden::LinkLocal)
            } else if v4.is_private() || (first == 100 && (second & 0xc0) == 64) {
                Some(Forbidden::Private)
            } else if v4.is_broadcast() || v4.is_multicast() || first >= 240 {
                Some(Forbidden::Unroutable)
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some(Forbidden::Loopback)
            } else if first & 0xffc0 == 0xfe80 {
                Some(Forbidden::LinkLocal)
            } else if first & 0xfe00 == 0xfc00 {
                Some(Forbidden::Private)
            } else if v6.is_multicast() {
                Some(Forbidden::Unroutable)
            } else {
                None
            }
        }
    }
}

/// The address as IPv4 when it is an IPv4 address in IPv6 clothing that a
/// socket treats as IPv4: mapped (`::ffff:a.b.c.d`) or compatible
/// (`::a.b.c.d`).
#[must_use]
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let compatible = v6.segments()[..6].iter().all(|&s| s == 0) && !v6.is_loopback() && !v6.is_unspecified();
            if compatible { IpAddr::V4(low_v4(v6)) } else { ip }
        }
    }
}

/// The IPv4 addresses an IPv6 address carries to a translator or tunnel:
/// NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`), SIIT (`::ffff:0:0:0/96`), 6to4
/// (`2002::/16`) and Teredo (`2001::/32`: its server and its client).
fn embedded_v4(ip: IpAddr) -> Vec<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else { return Vec::new() };
    let s = v6.segments();
    let from = |high: u16, low: u16| Ipv4Addr::new((high >> 8) as u8, high as u8, (low >> 8) as u8, low as u8);
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1);
    let siit = s[..6] == [0, 0, 0, 0, 0xffff, 0];
    if nat64 || siit {
        vec![low_v4(v6)]
    } else if s[0] == 0x2002 {
        vec![from(s[1], s[2])]
    } else if s[0] == 0x2001 && s[1] == 0 {
        vec![from(s[2], s[3]), from(!s[6], !s[7])]
    } else {
        Vec::new()
    }
}

fn low_v4(v6: Ipv6Addr) -> Ipv4Addr {
    let [.., a, b, c, d] = v6.octets();
    Ipv4Addr::new(a, b, c, d)
}

/// The address a URL host names when it is an IP literal, in any spelling a
/// URL parser or `inet_aton` accepts: dotted with one to four parts, each
/// decimal, octal (leading `0`) or hex (`0x`); or IPv6 in brackets. `None`
/// for a DNS name.
#[must_use]
pub fn ip_literal(host: &str) -> Option<IpAddr> {
    if let Some(inner) = host.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
        // A zone (`%eth0`) is not something a plugin gets to pick.
        return inner.parse::<Ipv6Addr>().ok().map(|v6| canonical(IpAddr::V6(v6)));
    }
    if let Ok(v6) = host.parse::<Ipv6Addr>() {
        return Some(canonical(IpAddr::V6(v6)));
    }
    ipv4_literal(host).map(IpAddr::V4)
}

/// `inet_aton`'s reading: `a`, `a.b`, `a.b.c` or `a.b.c.d`, the last part
/// filling the bytes that are left. A trailing dot is allowed, as URL parsers
/// allow it.
fn ipv4_literal(host: &str) -> Option<Ipv4Addr> {
    let host = host.strip_suffix('.').unwrap_or(host);
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let numbers: Vec<u64> = parts.iter().map(|part| number(part)).collect::<Option<_>>()?;
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|&n| n > 255) {
        return None;
    }
    let last_bytes = 4 - leading.len();
    if *last >= 1u64 << (8 * last_bytes) {
        return None;
    }
    let mut value: u64 = 0;
    for &n in leading {
        value = value << 8 | n;
    }
    value = value << (8 * last_bytes) | last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

fn number(part: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        // `0x` alone is zero to a URL parser.
        return (radix == 16).then_some(0);
    }
    if !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .filter(|&n| n <= u64::from(u32::MAX))
}

/// The addresses of this machine's interfaces, loopback included: what the
/// host refuses plugins as its own. Empty when they cannot be read.
#[must_use]
pub fn interface_addresses() -> Vec<IpAddr> {
    match if_addrs::get_if_addrs() {
        Ok(interfaces) => interfaces.into_iter().map(|interface| interface.ip()).collect(),
        Err(error) => {
            tracing::warn!("cannot read this machine's addresses: {error}; plugins are refused only the known ones");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(text: &str) -> Option<IpAddr> {
        text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    }

    fn at(address: &str) -> SocketAddr {
        address
            .parse()
            .unwrap_or_else(|_| SocketAddr::new(address.parse().unwrap(), 80))
    }

    fn nets(texts: &[&str]) -> Vec<IpNet> {
        texts.iter().map(|text| text.parse().unwrap()).collect()
    }

    #[test]
    fn every_spelling_of_loopback_and_metadata_is_read_as_that_address() {
        for spelling in [
            "127.0.0.1",
            "2130706433",
            "0x7f000001",
            "0x7f.1",
            "0177.0.0.1",
            "0177.0.0.01",
            "127.1",
            "127.0.1",
            "127.0.0.1.",
            "[::ffff:127.0.0.1]",
            "[::ffff:7f00:1]",
            "::ffff:127.0.0.1",
        ] {
            assert_eq!(ip_literal(spelling), v4("127.0.0.1"), "{spelling}");
        }
        for spelling in [
            "169.254.169.254",
            "2852039166",
            "0xa9fea9fe",
            "0251.0376.0251.0376",
            "169.254.43518",
            "[::ffff:169.254.169.254]",
            "[::169.254.169.254]",
        ] {
            assert_eq!(ip_literal(spelling), v4("169.254.169.254"), "{spelling}");
        }
        assert_eq!(ip_literal("[::1]"), Some("::1".parse().unwrap()));
        assert_eq!(ip_literal("0"), v4("0.0.0.0"));
    }

    #[test]
    fn names_and_malformed_numbers_are_not_ip_literals() {
        for host in [
            "hooks.slack.com",
            "alertmanager.monitoring.svc",
            "127.0.0.1.nip.io",
            "1.2.3.4.5",
            "256.1.1.1",
            "1.2.3.256",
            "08.1.1.1",
            "0x1g.1.1.1",
            "4294967296",
            "[::ffff:127.0.0.1%eth0]",
            "",
        ] {
            assert_eq!(ip_literal(host), None, "{host}");
        }
    }

    #[test]
    fn unspecified_loopback_link_local_and_private_are_refused_by_default() {
        let policy = AddressPolicy::default();
        for (address, forbidden) in [
            ("0.0.0.0", Forbidden::Unspecified),
            ("0.1.2.3", Forbidden::Unspecified),
            ("::", Forbidden::Unspecified),
            ("::ffff:0.0.0.0", Forbidden::Unspecified),
            ("127.0.0.1", Forbidden::Loopback),
            ("127.9.9.9", Forbidden::Loopback),
            ("::1", Forbidden::Loopback),
            ("::ffff:127.0.0.1", Forbidden::Loopback),
            ("169.254.1.1", Forbidden::LinkLocal),
            ("fe80::1", Forbidden::LinkLocal),
            ("10.0.0.7", Forbidden::Private),
            ("172.16.0.1", Forbidden::Private),
            ("172.31.255.255", Forbidden::Private),
            ("192.168.1.1", Forbidden::Private),
            ("100.64.0.1", Forbidden::Private),
            ("100.127.255.254", Forbidden::Private),
            ("fd00::1", Forbidden::Private),
            ("fc12::1", Forbidden::Private),
            ("255.255.255.255", Forbidden::Unroutable),
            ("224.0.0.1", Forbidden::Unroutable),
            ("240.0.0.1", Forbidden::Unroutable),
            ("ff02::1", Forbidden::Unroutable),
        ] {
            assert_eq!(policy.check(at(address), &[]), Err(forbidden), "{address}");
        }
        for public in [
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "8.8.8.8",
        ] {
            assert_eq!(policy.check(at(public), &[]), Ok(()), "{public}");
        }
    }

    #[test]
    fn every_known_metadata_address_is_refused_whatever_the_grant_opens() {
        let policy = AddressPolicy::default();
        let everything = nets(&["0.0.0.0/0", "::/0"]);
        for address in [
            "169.254.169.254",
            "fd00:ec2::254",
            "fd00:ec2::23",
            "169.254.170.23",
            "fd20:ce::254",
            "100.100.100.200",
            "168.63.129.16",
            "192.0.0.192",
            "fe80::a9fe:a9fe",
            "::ffff:169.254.169.254",
        ] {
            assert_eq!(
                policy.check(at(address), &everything),
                Err(Forbidden::Metadata),
                "{address}"
            );
        }
        assert_eq!(
            policy.check(at("169.254.20.10"), &nets(&["169.254.20.10/32"])),
            Ok(()),
            "a link-local address that is no metadata service opens by a network"
        );
    }

    #[test]
    fn forbidden_ipv4_addresses_wrapped_in_ipv6_are_refused_as_themselves() {
        let policy = AddressPolicy::default();
        for (address, forbidden) in [
            ("64:ff9b::a9fe:a9fe", Forbidden::Metadata),
            ("64:ff9b::7f00:1", Forbidden::Loopback),
            ("64:ff9b:1::a00:1", Forbidden::Private),
            ("::ffff:0:a9fe:a9fe", Forbidden::Metadata),
            ("2002:a9fe:a9fe::1", Forbidden::Metadata),
            ("2002:c0a8:101::1", Forbidden::Private),
            ("2002:7f00:1::", Forbidden::Loopback),
            ("2001:0:a9fe:a9fe::1", Forbidden::Metadata),
            // Teredo's client address is stored inverted.
            ("2001:0:5db8:1234:0:0:f5ff:fffe", Forbidden::Private),
        ] {
            assert_eq!(policy.check(at(address), &[]), Err(forbidden), "{address}");
        }
        assert_eq!(policy.check(at("64:ff9b::5db8:d822"), &[]), Ok(()));
    }

    #[test]
    fn a_network_of_the_grant_opens_exactly_what_it_contains() {
        let policy = AddressPolicy::default();
        let opened = nets(&["127.0.0.1/32", "10.96.0.0/12"]);
        assert_eq!(policy.check(at("127.0.0.1:8080"), &opened), Ok(()));
        assert_eq!(policy.check(at("[::ffff:127.0.0.1]:8080"), &opened), Ok(()));
        assert_eq!(policy.check(at("127.0.0.2:8080"), &opened), Err(Forbidden::Loopback));
        assert_eq!(policy.check(at("10.100.0.5"), &opened), Ok(()));
        assert_eq!(policy.check(at("10.200.0.5"), &opened), Err(Forbidden::Private));
        assert_eq!(policy.check(at("::1"), &opened), Err(Forbidden::Loopback));
        assert_eq!(
            policy.check(at("0.0.0.0"), &nets(&["0.0.0.0/0"])),
            Err(Forbidden::Unspecified),
            "unspecified never opens"
        );
    }

    #[test]
    fn the_api_server_is_refused_at_every_address_it_has() {
        let policy = AddressPolicy::new(["127.0.0.1:6443".parse().unwrap()]);
        policy.set_api_server(ApiSource::Service, ["10.96.0.1:443".parse().unwrap()]);
        policy.set_api_server(ApiSource::Endpoints, ["172.18.0.2:6443".parse().unwrap()]);
        let everything = nets(&["0.0.0.0/0", "::/0"]);
        for address in [
            "127.0.0.1:6443",
            "127.0.0.2:6443",
            "[::1]:6443",
            "[::ffff:127.0.0.1]:6443",
            "10.96.0.1:443",
            "10.96.0.1:80",
            "[::ffff:10.96.0.1]:443",
            "172.18.0.2:6443",
            "172.18.0.2:10250",
        ] {
            assert_eq!(
                policy.check(at(address), &everything),
                Err(Forbidden::ApiServer),
                "{address}"
            );
        }
        assert_eq!(
            policy.check(at("127.0.0.1:8080"), &everything),
            Ok(()),
            "another port of loopback is another server"
        );
        // The endpoints rotate: the old address is let go, the new refused.
        policy.set_api_server(ApiSource::Endpoints, ["172.18.0.3:6443".parse().unwrap()]);
        assert_eq!(policy.check(at("172.18.0.2:6443"), &everything), Ok(()));
        assert_eq!(
            policy.check(at("172.18.0.3:6443"), &everything),
            Err(Forbidden::ApiServer)
        );
    }

    #[test]
    fn the_host_s_own_addresses_and_ports_are_refused() {
        let policy = AddressPolicy::default();
        policy.set_host_addresses(["10.244.1.7".parse().unwrap(), "127.0.0.1".parse().unwrap()]);
        policy.add_host_port(9090);
        let everything = nets(&["0.0.0.0/0", "::/0"]);
        for address in ["10.244.1.7:80", "10.244.1.7:9090", "127.0.0.1:9090", "[::1]:9090"] {
            assert_eq!(
                policy.check(at(address), &everything),
                Err(Forbidden::Host),
                "{address}"
            );
        }
        assert_eq!(policy.check(at("127.0.0.1:8080"), &everything), Ok(()));
        assert_eq!(
            policy.check(at("10.244.1.8:9090"), &everything),
            Ok(()),
            "another pod's port"
        );
    }
}
