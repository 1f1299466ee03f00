//! Which addresses a plugin's request may connect to, and IP literals in every
//! spelling a URL parser accepts.
//!
//! A tenant who may reach `hooks.example.com` must not reach the cloud's
//! metadata service, the host's own loopback services or the API server by
//! naming them some other way: by a DNS name that resolves to them, or by an
//! IP literal written in decimal (`2130706433`), hex (`0x7f.1`), octal
//! (`0177.0.0.1`) or as an IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`).
//! [`ip_literal`] reads every such spelling as the address it means, and
//! [`AddressPolicy::check`] is the one decision about an address, made for every
//! address a name resolves to before the host connects to the one it checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why an address was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forbidden {
    /// Loopback or unspecified (`127.0.0.0/8`, `0.0.0.0/8`, `::1`, `::`):
    /// the host's own services.
    Loopback,
    /// Link-local (`169.254.0.0/16`, `fe80::/10`): cloud metadata services.
    LinkLocal,
    /// The API server's own address: plugins reach it through the host.
    ApiServer,
    /// Broadcast, multicast or reserved: no HTTP server lives there.
    Unroutable,
}

impl Forbidden {
    /// What the address is, as a refusal says it.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Loopback => "a loopback address",
            Self::LinkLocal => "a link-local address (cloud metadata)",
            Self::ApiServer => "the API server's address",
            Self::Unroutable => "a broadcast, multicast or reserved address",
        }
    }
}

/// The addresses every plugin's requests are refused, whatever its allow-list
/// says, and the IP literals an operator listed to let some of them through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// The API server's addresses (with their ports).
    api_server: Vec<SocketAddr>,
}

impl AddressPolicy {
    /// A policy that also refuses these addresses of the API server.
    #[must_use]
    pub fn new(api_server: impl IntoIterator<Item = SocketAddr>) -> Self {
        Self {
            api_server: api_server
                .into_iter()
                .map(|address| SocketAddr::new(canonical(address.ip()), address.port()))
                .collect(),
        }
    }

    /// Whether `address` may be connected to. `listed` is the IP literal the
    /// allow-list entry that let the request through names, if it names one:
    /// a loopback or link-local address is allowed when it is exactly that.
    ///
    /// # Errors
    ///
    /// Why the address is refused.
    pub fn check(&self, address: SocketAddr, listed: Option<IpAddr>) -> Result<(), Forbidden> {
        let ip = canonical(address.ip());
        let port = address.port();
        if self.api_server.iter().any(|api| api.ip() == ip && api.port() == port) {
            return Err(Forbidden::ApiServer);
        }
        let class = classify(ip);
        match class {
            None => Ok(()),
            Some(Forbidden::Loopback | Forbidden::LinkLocal) if listed.map(canonical) == Some(ip) => Ok(()),
            Some(forbidden) => Err(forbidden),
        }
    }
}

/// The class of an address a plugin is never let reach unless listed.
fn classify(ip: IpAddr) -> Option<Forbidden> {
    match ip {
        IpAddr::V4(v4) => {
            let [first, second, ..] = v4.octets();
            if v4.is_loopback() || first == 0 {
                Some(Forbidden::Loopback)
            } else if v4.is_link_local() {
                Some(Forbidden::LinkLocal)
            } else if v4.is_broadcast()
                || v4.is_multicast()
                || first >= 240
                || (first == 192 && second == 0 && v4.octets()[2] == 0)
            {
                Some(Forbidden::Unroutable)
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            if v6.is_loopback() || v6.is_unspecified() {
                Some(Forbidden::Loopback)
            } else if segments[0] & 0xffc0 == 0xfe80 {
                Some(Forbidden::LinkLocal)
            } else if v6.is_multicast() {
                Some(Forbidden::Unroutable)
            } else {
                None
            }
        }
    }
}

/// The address as IPv4 when it is an IPv4 address in IPv6 clothing: mapped
/// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`) or NAT64 (`64:ff9b::a.b.c.d`).
#[must_use]
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
    }
}

fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let segments = v6.segments();
    let low = Ipv4Addr::new(
        (segments[6] >> 8) as u8,
        segments[6] as u8,
        (segments[7] >> 8) as u8,
        segments[7] as u8,
    );
    let compatible = segments[..6].iter().all(|&s| s == 0) && !v6.is_loopback() && !v6.is_unspecified();
    let nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (compatible || nat64).then_some(low)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(text: &str) -> Option<IpAddr> {
        text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
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
            "[64:ff9b::a9fe:a9fe]",
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
    fn loopback_link_local_and_unspecified_are_refused_unless_listed_exactly() {
        let policy = AddressPolicy::default();
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 80);
        assert_eq!(policy.check(at("127.0.0.1"), None), Err(Forbidden::Loopback));
        assert_eq!(policy.check(at("127.9.9.9"), None), Err(Forbidden::Loopback));
        assert_eq!(policy.check(at("0.0.0.0"), None), Err(Forbidden::Loopback));
        assert_eq!(policy.check(at("::"), None), Err(Forbidden::Loopback));
        assert_eq!(policy.check(at("::1"), None), Err(Forbidden::Loopback));
        assert_eq!(policy.check(at("::ffff:127.0.0.1"), None), Err(Forbidden::Loopback));
        assert_eq!(policy.check(at("169.254.169.254"), None), Err(Forbidden::LinkLocal));
        assert_eq!(policy.check(at("fe80::1"), None), Err(Forbidden::LinkLocal));
        assert_eq!(policy.check(at("64:ff9b::a9fe:a9fe"), None), Err(Forbidden::LinkLocal));
        assert_eq!(policy.check(at("255.255.255.255"), None), Err(Forbidden::Unroutable));
        assert_eq!(policy.check(at("224.0.0.1"), None), Err(Forbidden::Unroutable));

        let listed = "127.0.0.1".parse().ok();
        assert_eq!(policy.check(at("127.0.0.1"), listed), Ok(()));
        assert_eq!(
            policy.check(at("127.0.0.2"), listed),
            Err(Forbidden::Loopback),
            "only the exact literal listed"
        );
        assert_eq!(policy.check(at("::ffff:127.0.0.1"), listed), Ok(()));

        for public in ["10.0.0.7", "192.168.1.1", "93.184.216.34", "2001:db8::1", "fd00::1"] {
            assert_eq!(policy.check(at(public), None), Ok(()), "{public}");
        }
    }

    #[test]
    fn the_api_server_is_refused_even_when_listed() {
        let api: SocketAddr = "127.0.0.1:6443".parse().unwrap();
        let policy = AddressPolicy::new([api, "10.96.0.1:443".parse().unwrap()]);
        let listed = Some(api.ip());
        assert_eq!(policy.check(api, listed), Err(Forbidden::ApiServer));
        assert_eq!(
            policy.check("[::ffff:10.96.0.1]:443".parse().unwrap(), None),
            Err(Forbidden::ApiServer)
        );
        assert_eq!(
            policy.check("127.0.0.1:8080".parse().unwrap(), listed),
            Ok(()),
            "another port of a listed loopback literal is another server"
        );
        assert_eq!(policy.check("10.96.0.1:8443".parse().unwrap(), None), Ok(()));
    }
}
