//! The HTTP allow-list of a plugin's manifest, and the one decision whether a
//! request's URL is on it.
//!
//! An entry is `scheme://host[:port][/path-prefix]`: `https` or `http`, a DNS
//! name (`*.example.com` for its subdomains), an IP literal, or `*` for any
//! host; the scheme's port when none is given; and a path the request's path
//! must be under. Names compare without case or a trailing dot, IP literals
//! by the address they spell, paths as a server reads them: percent-decoded,
//! `;` parameters and dot segments resolved ([`normalize_path`]).
//!
//! Beside the list, the grant's `networks` are the private, loopback and
//! link-local networks (CIDRs) the plugin may reach at all; none by default
//! (see [`super::AddressPolicy`]).

use std::fmt;
use std::net::IpAddr;

use super::address::{IpNet, ip_literal};

/// Why an allow-list entry or a request URL cannot be read. Each variant
/// holds the URL as [`crate::text::redact_url`] shows it: never its user
/// info, query or fragment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Not `http://` or `https://`.
    #[error("{0:?}: the scheme must be http or https")]
    Scheme(String),
    /// No host, a malformed one, a bad port, or user info (`user@host`).
    #[error("{0:?}: want scheme://host[:port][/path], without user info")]
    Malformed(String),
    /// A path prefix with `.`/`..` segments, encoded dots or a query.
    #[error("{0:?}: a path prefix is a plain path, without dot segments, escapes, parameters or a query")]
    Path(String),
    /// A port past 65535, or 0.
    #[error("{0:?}: the port must be from 1 to 65535")]
    Port(String),
    /// A network that is not a CIDR.
    #[error("{0:?}: a network is a CIDR, e.g. 10.96.0.0/12 or fd00::/8")]
    Network(String),
}

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Self::Http),
            "https" => Some(Self::Https),
            _ => None,
        }
    }

    /// The port a URL without one means.
    #[must_use]
    pub fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }

    /// `http` or `https`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// A host as a URL names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// A DNS name, lower case, without a trailing dot.
    Name(String),
    /// An IP literal, as the address it spells.
    Ip(IpAddr),
}

impl Host {
    fn parse(text: &str) -> Option<Self> {
        if let Some(ip) = ip_literal(text) {
            return Some(Self::Ip(ip));
        }
        let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
        let valid = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        valid.then_some(Self::Name(name))
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Self::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
        }
    }
}

/// Where a request goes: its scheme, host, port and path (without the query).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// The host as the URL names it.
    pub host: Host,
    /// The port, the scheme's when the URL gives none.
    pub port: u16,
    /// The path, `/` when empty.
    pub path: String,
}

impl Target {
    /// Reads a request's URL.
    ///
    /// # Errors
    ///
    /// When the scheme is not http(s), there is no host, or there is user info.
    pub fn parse(uri: &http::Uri) -> Result<Self, UrlError> {
        let text = crate::text::redact_url(&uri.to_string());
        let scheme = uri
            .scheme_str()
            .and_then(Scheme::parse)
            .ok_or_else(|| UrlError::Scheme(text.clone()))?;
        let authority = uri.authority().ok_or_else(|| UrlError::Malformed(text.clone()))?;
        if authority.as_str().contains('@') {
            return Err(UrlError::Malformed(text));
        }
        let host = Host::parse(authority.host()).ok_or_else(|| UrlError::Malformed(text.clone()))?;
        let path = match uri.path() {
            "" => "/".to_owned(),
            path => path.to_owned(),
        };
        Ok(Self {
            scheme,
            host,
            port: authority.port_u16().unwrap_or(scheme.default_port()),
            path,
        })
    }

    /// `scheme://host:port`, as the audit and the metrics name it (never the
    /// path or query, which may carry tokens).
    #[must_use]
    pub fn origin(&self) -> String {
        format!("{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

/// Which hosts an entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exact(Host),
    /// `*.suffix`: names ending in `.suffix`.
    Subdomains(String),
    /// `*`: any host (still never a forbidden address).
    Any,
}

/// One entry of a plugin's HTTP allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedUrl {
    text: String,
    scheme: Scheme,
    host: HostPattern,
    port: u16,
    path_prefix: Option<String>,
}

impl AllowedUrl {
    /// Reads an entry: `scheme://host[:port][/path-prefix]`.
    ///
    /// # Errors
    ///
    /// When the scheme, host, port or path is malformed.
    pub fn parse(text: &str) -> Result<Self, UrlError> {
        let shown = || crate::text::redact_url(text);
        let (scheme, rest) = text.split_once("://").ok_or_else(|| UrlError::Malformed(shown()))?;
        let scheme = Scheme::parse(scheme).ok_or_else(|| UrlError::Scheme(shown()))?;
        let (authority, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], Some(&rest[slash..])),
            None => (rest, None),
        };
        let malformed = || UrlError::Malformed(shown());
        if authority.contains('@') || authority.is_empty() {
            return Err(malformed());
        }
        let (host, port) = split_port(authority).ok_or_else(malformed)?;
        let port = match port {
            Some(port) if port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()) => return Err(malformed()),
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| UrlError::Port(shown()))?,
            None => scheme.default_port(),
        };
        let host = match host {
            "*" => HostPattern::Any,
            wild if wild.starts_with("*.") => match Host::parse(&wild[2..]) {
                Some(Host::Name(suffix)) => HostPattern::Subdomains(suffix),
                _ => return Err(malformed()),
            },
            exact => HostPattern::Exact(Host::parse(exact).ok_or_else(malformed)?),
        };
        let path_prefix = match path {
            None | Some("/") => None,
            Some(path) if path.contains(['?', '#', '\\', '%', ';']) || has_dot_segment(path) => {
                return Err(UrlError::Path(shown()));
            }
            Some(path) => Some(path.to_owned()),
        };
        Ok(Self {
            text: text.to_owned(),
            scheme,
            host,
            port,
            path_prefix,
        })
    }

    /// The IP literal the entry names, if it names one.
    #[must_use]
    pub fn ip(&self) -> Option<IpAddr> {
        match &self.host {
            HostPattern::Exact(Host::Ip(ip)) => Some(*ip),
            _ => None,
        }
    }

    /// The DNS name the entry names, if it names one.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        match &self.host {
            HostPattern::Exact(Host::Name(name)) => Some(name),
            _ => None,
        }
    }

    /// True when a request to `target` is allowed by this entry.
    #[must_use]
    pub fn allows(&self, target: &Target) -> bool {
        let host = match (&self.host, &target.host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(allowed), host) => allowed == host,
            (HostPattern::Subdomains(suffix), Host::Name(name)) => subdomain_of(name, suffix),
            (HostPattern::Subdomains(_), Host::Ip(_)) => false,
        };
        let path = match &self.path_prefix {
            None => true,
            // Compared as the server will read the path: a path that walks
            // out of the prefix (with dot segments, plain, encoded or behind
            // `;` parameters) is not under it, nor one that cannot be read.
            Some(prefix) => normalize_path(&target.path).is_some_and(|path| under(&path, prefix)),
        };
        self.scheme == target.scheme && host && self.port == target.port && path
    }
}

impl AllowedUrl {
    /// True when every request `other` allows, this entry allows too: the
    /// same scheme and port, a host pattern at least as wide, a path prefix
    /// at most as deep.
    #[must_use]
    pub fn covers(&self, other: &Self) -> bool {
        let host = match (&self.host, &other.host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(mine), HostPattern::Exact(theirs)) => mine == theirs,
            (HostPattern::Subdomains(mine), HostPattern::Exact(Host::Name(name))) => subdomain_of(name, mine),
            (HostPattern::Subdomains(mine), HostPattern::Subdomains(theirs)) => {
                mine == theirs || subdomain_of(theirs, mine)
            }
            _ => false,
        };
        let path = match (&self.path_prefix, &other.path_prefix) {
            (None, _) => true,
            (Some(mine), Some(theirs)) => under(theirs, mine),
            (Some(_), None) => false,
        };
        self.scheme == other.scheme && self.port == other.port && host && path
    }
}

impl fmt::Display for AllowedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `host` and `port` of an authority; IPv6 literals are in brackets.
fn split_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Some((host, None)),
            port => port.strip_prefix(':').map(|port| (host, Some(port))),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port))),
        None => Some((authority, None)),
    }
}

fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|segment| segment == "." || segment == "..")
}

/// Why a name on the allow-list can never work, if it cannot.
fn name_problem(name: &str, networks: &[IpNet]) -> Option<String> {
    const METADATA_NAMES: &[&str] = &[
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
    ];
    const API_SERVER_NAMES: &[&str] = &[
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ];
    let loopback_opened = networks
        .iter()
        .any(|network| network.contains(&IpAddr::from([127, 0, 0, 1])));
    if METADATA_NAMES.contains(&name) {
        Some(format!(
            "{name} is a cloud's metadata service, which no plugin ever reaches"
        ))
    } else if API_SERVER_NAMES.contains(&name) {
        Some(format!(
            "{name} is the API server, which plugins reach through the host ([[grant.read]], [[grant.write]]), never by HTTP"
        ))
    } else if (name == "localhost" || name.ends_with(".localhost")) && !loopback_opened {
        Some(format!(
            "{name} is loopback, refused unless networks opens it, e.g. networks = [\"127.0.0.1/32\"]"
        ))
    } else if (name.ends_with(".svc") || name.ends_with(".cluster.local")) && networks.is_empty() {
        Some(format!(
            "{name} is a cluster Service, whose private address is refused unless networks opens the cluster's Service range, e.g. networks = [\"10.96.0.0/12\"]"
        ))
    } else {
        None
    }
}

/// True when `path` is `prefix` or below it: `/hooks/ok` is under `/hooks/ok`
/// and `/hooks/`, not under `/hooks/o`.
/// True when `name` is a subdomain of `suffix` (`a.example.com` of
/// `example.com`; not `example.com` itself, nor `badexample.com`).
fn subdomain_of(name: &str, suffix: &str) -> bool {
    name.strip_suffix(suffix)
        .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
}

fn under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        None => false,
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
    }
}

/// A request path as a server reads it: each segment's `;` parameters
/// dropped, percent escapes decoded, `.` and `..` segments resolved. `None`
/// for a path that means different things to different servers: a bad
/// escape, an escape that decodes to `/`, `\`, `%`, `;` or a control
/// character (an encoded separator, or an escape escaped twice), a `\`, or
/// a `..` above the root.
#[must_use]
pub fn normalize_path(path: &str) -> Option<String> {
    if !path.starts_with('/') || path.contains('\\') {
        return None;
    }
    let mut segments: Vec<String> = Vec::new();
    let raw: Vec<&str> = path[1..].split('/').collect();
    let last = raw.len() - 1;
    for (i, segment) in raw.into_iter().enumerate() {
        let segment = segment.split_once(';').map_or(segment, |(name, _)| name);
        let decoded = percent_decode(segment)?;
        let dots = matches!(decoded.as_str(), "." | "..");
        if decoded == ".." {
            segments.pop()?;
        } else if !dots {
            segments.push(decoded);
        }
        // A path ending in a dot segment names a directory.
        if i == last && dots {
            segments.push(String::new());
        }
    }
    Some(format!("/{}", segments.join("/")))
}

fn percent_decode(segment: &str) -> Option<String> {
    if !segment.contains('%') {
        return Some(segment.to_owned());
    }
    let bytes = segment.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            let byte = u8::from_str_radix(hex, 16).ok()?;
            if matches!(byte, b'/' | b'\\' | b'%' | b';') || byte.is_ascii_control() {
                return None;
            }
            decoded.push(byte);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// A plugin's HTTP allow-list, and the private networks it may reach: empty,
/// the default, allows nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpGrant {
    allow: Vec<AllowedUrl>,
    networks: Vec<IpNet>,
}

impl HttpGrant {
    /// A grant of these entries.
    ///
    /// # Errors
    ///
    /// When an entry is malformed.
    pub fn new<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, UrlError> {
        Ok(Self {
            allow: entries.into_iter().map(AllowedUrl::parse).collect::<Result<_, _>>()?,
            networks: Vec::new(),
        })
    }

    /// Opens these networks (CIDRs: `10.96.0.0/12`, `127.0.0.1/32`,
    /// `fd00::/8`) to the plugin: the loopback, link-local and private
    /// addresses in them are let through. Never metadata services, the API
    /// server or the host itself.
    ///
    /// # Errors
    ///
    /// When a network is not a CIDR.
    pub fn with_networks<'a>(mut self, networks: impl IntoIterator<Item = &'a str>) -> Result<Self, UrlError> {
        self.networks = networks
            .into_iter()
            .map(|text| {
                text.parse::<IpNet>()
                    .map(|net| net.trunc())
                    .map_err(|_| UrlError::Network(text.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// The entries.
    #[must_use]
    pub fn entries(&self) -> &[AllowedUrl] {
        &self.allow
    }

    /// The networks the grant opens.
    #[must_use]
    pub fn networks(&self) -> &[IpNet] {
        &self.networks
    }

    /// True when no request is allowed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty()
    }

    /// What can never work in the grant, one sentence each: an entry naming
    /// an address no plugin reaches (a metadata service, an unspecified
    /// address), or one refused unless `networks` opens it (a loopback,
    /// private or link-local literal, `localhost`, a cluster Service's
    /// name), or the API server by its in-cluster name. `kinformer check`
    /// prints them.
    #[must_use]
    pub fn problems(&self) -> Vec<String> {
        let policy = super::AddressPolicy::default();
        let mut problems = Vec::new();
        for entry in &self.allow {
            match &entry.host {
                HostPattern::Exact(Host::Ip(ip)) => {
                    match policy.check(std::net::SocketAddr::new(*ip, entry.port), &self.networks) {
                        Ok(()) => {}
                        Err(forbidden) if forbidden.can_be_opened() => problems.push(format!(
                            "{entry}: {ip} is {}: add a network that holds it, e.g. networks = [\"{}\"]",
                            forbidden.describe(),
                            IpNet::from(*ip)
                        )),
                        Err(forbidden) => problems.push(format!(
                            "{entry}: {ip} is {}, which no plugin ever reaches",
                            forbidden.describe()
                        )),
                    }
                }
                HostPattern::Exact(Host::Name(name)) => {
                    if let Some(problem) = name_problem(name, &self.networks) {
                        problems.push(format!("{entry}: {problem}"));
                    }
                }
                HostPattern::Subdomains(_) | HostPattern::Any => {}
            }
        }
        problems
    }

    /// True when `ip`, refused by default, is in a network the grant opens.
    #[must_use]
    pub fn opens(&self, ip: IpAddr) -> bool {
        self.networks.iter().any(|network| network.contains(&ip))
    }

    /// The first entry that allows a request to `target`.
    #[must_use]
    pub fn allowing(&self, target: &Target) -> Option<&AllowedUrl> {
        self.allow.iter().find(|entry| entry.allows(target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target::parse(&url.parse().unwrap()).unwrap()
    }

    fn grant(entries: &[&str]) -> HttpGrant {
        HttpGrant::new(entries.iter().copied()).unwrap()
    }

    #[test]
    fn an_entry_allows_its_scheme_host_port_and_path_prefix_only() {
        let slack = grant(&["https://hooks.slack.com/services/"]);
        assert!(
            slack
                .allowing(&target("https://hooks.slack.com/services/T0/B0/x"))
                .is_some()
        );
        assert!(
            slack
                .allowing(&target("https://HOOKS.slack.com./services/T0"))
                .is_some()
        );
        assert!(
            slack
                .allowing(&target("https://hooks.slack.com:443/services/T0"))
                .is_some()
        );
        for refused in [
            "http://hooks.slack.com/services/T0",
            "https://hooks.slack.com:8443/services/T0",
            "https://hooks.slack.com/api/chat.postMessage",
            "https://hooks.slack.com/services/../api/x",
            "https://hooks.slack.com/services/%2e%2e/api",
            "https://evil.com/services/x",
            "https://hooks.slack.com.evil.com/services/x",
        ] {
            assert!(slack.allowing(&target(refused)).is_none(), "{refused}");
        }
    }

    #[test]
    fn a_wildcard_allows_subdomains_but_not_the_name_itself_or_look_alikes() {
        let any_svc = grant(&["http://*.monitoring.svc:9093"]);
        assert!(
            any_svc
                .allowing(&target("http://alertmanager.monitoring.svc:9093/"))
                .is_some()
        );
        assert!(any_svc.allowing(&target("http://a.b.monitoring.svc:9093/")).is_some());
        assert!(any_svc.allowing(&target("http://monitoring.svc:9093/")).is_none());
        assert!(any_svc.allowing(&target("http://evilmonitoring.svc:9093/")).is_none());
        assert!(
            any_svc
                .allowing(&target("http://alertmanager.monitoring.svc/"))
                .is_none()
        );
    }

    #[test]
    fn ip_literals_match_by_the_address_they_spell() {
        let local = grant(&["http://127.0.0.1:8080"]);
        let entry = local.allowing(&target("http://2130706433:8080/hook")).unwrap();
        assert_eq!(entry.ip(), Some("127.0.0.1".parse().unwrap()));
        assert!(local.allowing(&target("http://0x7f.1:8080/")).is_some());
        assert!(local.allowing(&target("http://[::ffff:127.0.0.1]:8080/")).is_some());
        assert!(local.allowing(&target("http://localhost:8080/")).is_none());
        assert!(local.allowing(&target("http://127.0.0.2:8080/")).is_none());
    }

    #[test]
    fn a_path_is_matched_as_the_server_reads_it() {
        let hooks = grant(&["https://example.com/hooks/ok/"]);
        let allowed = |path: &str| hooks.allowing(&target(&format!("https://example.com{path}"))).is_some();
        for path in [
            "/hooks/ok/",
            "/hooks/ok/send",
            "/hooks/ok/a/../b",
            "/hooks/ok/./x",
            "/hooks/ok;v=1/x",
            "/hooks/ok/%61bc",
            "/hooks/ok/hello%20world",
        ] {
            assert!(allowed(path), "{path}");
        }
        for path in [
            "/hooks/ok/..;/admin",
            "/hooks/ok/../admin",
            "/hooks/ok/..%2f..%2fadmin",
            "/hooks/ok/%2e%2e/admin",
            "/hooks/ok/%2E%2E/admin",
            "/hooks/ok/%252e%252e/admin",
            "/hooks/ok/%2e%2e%3b/admin",
            "/hooks/ok/x%5c..%5cadmin",
            "/hooks/ok/%zz",
            "/hooks/ok/%00",
            "/hooks/ok/../../../etc",
            "/hooks/okay",
            "/hooks/o",
            "/admin",
        ] {
            assert!(!allowed(path), "{path}");
        }
        let exact = grant(&["https://example.com/api"]);
        assert!(exact.allowing(&target("https://example.com/api")).is_some());
        assert!(exact.allowing(&target("https://example.com/api/v1")).is_some());
        assert!(exact.allowing(&target("https://example.com/apiary")).is_none());
    }

    #[test]
    fn normalizing_resolves_dots_and_refuses_what_servers_read_differently() {
        assert_eq!(normalize_path("/a/./b/../c").as_deref(), Some("/a/c"));
        assert_eq!(normalize_path("/a/b/..").as_deref(), Some("/a/"));
        assert_eq!(normalize_path("/a;x/b;y=1").as_deref(), Some("/a/b"));
        assert_eq!(normalize_path("/%41").as_deref(), Some("/A"));
        assert_eq!(normalize_path("/.."), None);
        assert_eq!(normalize_path("/a/%2f"), None);
        assert_eq!(normalize_path("/a/%25"), None);
        assert_eq!(normalize_path("/a/%"), None);
        assert_eq!(normalize_path("/a\\b"), None);
    }

    #[test]
    fn entries_that_can_never_work_are_named() {
        let problems = |entries: &[&str], networks: &[&str]| {
            HttpGrant::new(entries.iter().copied())
                .unwrap()
                .with_networks(networks.iter().copied())
                .unwrap()
                .problems()
        };
        let found = problems(
            &[
                "http://169.254.169.254/latest/",
                "http://127.0.0.1:8080",
                "http://localhost:9000",
                "http://metadata.google.internal",
                "https://kubernetes.default.svc",
                "http://alertmanager.monitoring.svc:9093",
                "https://hooks.slack.com/services/",
                "http://0.0.0.0:80",
            ],
            &[],
        );
        assert_eq!(found.len(), 7, "{found:#?}");
        assert!(
            found[0].contains("a cloud metadata service, which no plugin ever reaches"),
            "{}",
            found[0]
        );
        assert!(found[1].contains("networks = [\"127.0.0.1/32\"]"), "{}", found[1]);
        assert!(found[2].contains("localhost is loopback"), "{}", found[2]);
        assert!(found[3].contains("metadata service"), "{}", found[3]);
        assert!(found[4].contains("the API server"), "{}", found[4]);
        assert!(found[5].contains("cluster Service"), "{}", found[5]);
        assert!(found[6].contains("unspecified"), "{}", found[6]);
        assert!(
            problems(
                &["http://127.0.0.1:8080", "http://localhost:1", "http://a.b.svc"],
                &["127.0.0.0/8", "10.96.0.0/12"]
            )
            .is_empty()
        );
    }

    #[test]
    fn networks_are_cidrs() {
        let grant = HttpGrant::default()
            .with_networks(["10.96.0.0/12", "127.0.0.1/32", "fd00::/8", "10.1.2.3/8"])
            .unwrap();
        assert!(grant.opens("10.100.1.1".parse().unwrap()));
        assert!(grant.opens("10.1.1.1".parse().unwrap()), "a host part is dropped");
        assert!(!grant.opens("192.168.0.1".parse().unwrap()));
        for bad in ["10.0.0.0", "10.0.0.0/33", "ten/8", "fd00::/129"] {
            assert_eq!(
                HttpGrant::default().with_networks([bad]),
                Err(UrlError::Network(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_default_grant_allows_nothing_and_a_star_allows_any_host() {
        assert!(HttpGrant::default().allowing(&target("https://example.com/")).is_none());
        let any = grant(&["https://*"]);
        assert!(any.allowing(&target("https://example.com/")).is_some());
        assert!(any.allowing(&target("http://example.com/")).is_none());
    }

    #[test]
    fn malformed_entries_are_refused_with_the_reason() {
        for (entry, error) in [
            ("ftp://example.com", UrlError::Scheme("ftp://example.com".into())),
            ("example.com", UrlError::Malformed("example.com".into())),
            (
                "https://user:SECRET@example.com",
                UrlError::Malformed("https://…@example.com".into()),
            ),
            ("https://example.com:0", UrlError::Port("https://example.com:0".into())),
            (
                "https://example.com:99999",
                UrlError::Port("https://example.com:99999".into()),
            ),
            (
                "https://example.com:https",
                UrlError::Malformed("https://example.com:https".into()),
            ),
            ("https://*.", UrlError::Malformed("https://*.".into())),
            (
                "https://ex ample.com",
                UrlError::Malformed("https://ex ample.com".into()),
            ),
            (
                "https://example.com/a/../b",
                UrlError::Path("https://example.com/a/../b".into()),
            ),
            (
                "https://example.com/a?SECRET",
                UrlError::Path("https://example.com/a?…".into()),
            ),
        ] {
            assert_eq!(AllowedUrl::parse(entry), Err(error), "{entry}");
        }
        assert!(AllowedUrl::parse("http://[::1]:9000/x").is_ok());
    }

    #[test]
    fn a_target_s_origin_carries_no_path_or_query() {
        let t = target("https://hooks.slack.com/services/T0/B0/secret?token=x");
        assert_eq!(t.origin(), "https://hooks.slack.com:443");
        assert_eq!(target("http://[::1]:81/").origin(), "http://[::1]:81");
        assert!(Target::parse(&"https://u:p@example.com/".parse().unwrap()).is_err());
    }

    #[test]
    fn a_refused_url_s_error_carries_no_user_info_or_query() {
        let refused = Target::parse(&"http://user:SECRET@example.com/hook?token=SECRET".parse().unwrap()).unwrap_err();
        assert_eq!(refused, UrlError::Malformed("http://…@example.com/hook?…".into()));
        let message = refused.to_string();
        assert!(
            !message.contains("SECRET") && message.contains("without user info"),
            "{message}"
        );
        let ftp = Target::parse(&"ftp://user:SECRET@example.com/?SECRET".parse().unwrap()).unwrap_err();
        assert!(!ftp.to_string().contains("SECRET"), "{ftp}");
    }
}
