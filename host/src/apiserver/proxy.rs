//! The proxy the host's own Kubernetes client goes through, chosen from the
//! environment as kubectl (Go's `http.ProxyFromEnvironment`) chooses it.
//!
//! `HTTPS_PROXY` for an `https://` server, `HTTP_PROXY` for an `http://` one
//! (upper or lower case, upper first); none for a server `NO_PROXY` names (`*`,
//! a name and its subdomains, `.example.com`, an IP, a CIDR, each with an
//! optional port), nor for `localhost` or a loopback address. A proxy URL
//! without a scheme is `http://`. A kubeconfig's own `proxy-url` wins over all
//! of these.
//!
//! Plugins' outbound HTTP never goes through a proxy: it connects to the
//! address the host checked ([`crate::outbound`]).

use std::net::IpAddr;

/// The proxy for a client of `server`, from the variables `env` reads
/// (`std::env::var(..).ok()` in a program).
#[must_use]
pub fn proxy_for(server: &http::Uri, env: impl Fn(&str) -> Option<String>) -> Option<http::Uri> {
    let read = |name: &str| {
        env(name)
            .or_else(|| env(&name.to_ascii_lowercase()))
            .filter(|value| !value.trim().is_empty())
    };
    let https = server.scheme_str() == Some("https");
    let proxy = read(if https { "HTTPS_PROXY" } else { "HTTP_PROXY" })?;
    let host = server.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = server.port_u16().unwrap_or(if https { 443 } else { 80 });
    if host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) {
        return None;
    }
    if let Some(no_proxy) = read("NO_PROXY")
        && excluded(&no_proxy, host, port)
    {
        return None;
    }
    let proxy = proxy.trim();
    let proxy = if proxy.contains("://") {
        proxy.to_owned()
    } else {
        format!("http://{proxy}")
    };
    proxy.parse().ok()
}

/// Sets `config`'s proxy from the environment as [`proxy_for`] chooses it,
/// unless its kubeconfig named one: kube reads only `HTTPS_PROXY`, for every
/// server, loopback included.
pub fn apply_environment(config: &mut kube::Config, env: impl Fn(&str) -> Option<String>) {
    // kube takes the kubeconfig's, else `HTTPS_PROXY`'s: one equal to the
    // variable's came from it.
    let from_env = env("HTTPS_PROXY")
        .or_else(|| env("https_proxy"))
        .and_then(|text| text.trim().parse::<http::Uri>().ok());
    let from_kubeconfig = config.proxy_url.is_some() && config.proxy_url != from_env;
    if !from_kubeconfig {
        config.proxy_url = proxy_for(&config.cluster_url, env);
    }
}

/// True when `NO_PROXY`'s list names the server.
fn excluded(no_proxy: &str, host: &str, port: u16) -> bool {
    let host = host.to_ascii_lowercase();
    let ip = host.parse::<IpAddr>().ok();
    no_proxy
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            if let Ok(network) = entry.parse::<ipnet::IpNet>() {
                return ip.is_some_and(|ip| network.contains(&ip));
            }
            let entry = entry.trim_start_matches('[');
            let (name, entry_port) = match entry.rsplit_once(':') {
                Some((name, entry_port)) if !name.contains(':') || name.ends_with(']') => {
                    (name.trim_end_matches(']'), entry_port.parse::<u16>().ok())
                }
                _ => (entry.trim_end_matches(']'), None),
            };
            if entry_port.is_some_and(|entry_port| entry_port != port) {
                return false;
            }
            if let Ok(entry_ip) = name.parse::<IpAddr>() {
                return ip == Some(entry_ip);
            }
            let name = name
                .trim_start_matches("*.")
                .trim_start_matches('.')
                .to_ascii_lowercase();
            host == name || host.ends_with(&format!(".{name}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn proxy(server: &str, vars: &[(&str, &str)]) -> Option<String> {
        proxy_for(&server.parse().unwrap(), env(vars)).map(|uri| uri.to_string())
    }

    #[test]
    fn the_scheme_picks_the_variable_and_loopback_is_never_proxied() {
        let vars = [("HTTPS_PROXY", "http://proxy:3128"), ("http_proxy", "plain:8080")];
        assert_eq!(
            proxy("https://10.0.0.1:6443", &vars).as_deref(),
            Some("http://proxy:3128/")
        );
        assert_eq!(
            proxy("http://10.0.0.1:8080", &vars).as_deref(),
            Some("http://plain:8080/")
        );
        assert_eq!(proxy("https://127.0.0.1:6443", &vars), None);
        assert_eq!(proxy("https://[::1]:6443", &vars), None);
        assert_eq!(proxy("https://localhost:6443", &vars), None);
        assert_eq!(proxy("https://10.0.0.1", &[]), None);
    }

    #[test]
    fn no_proxy_takes_names_subdomains_ips_cidrs_ports_and_a_star() {
        let with = |no_proxy: &str, server: &str| {
            proxy(server, &[("HTTPS_PROXY", "http://proxy:3128"), ("NO_PROXY", no_proxy)]).is_none()
        };
        assert!(with("example.com", "https://api.example.com"));
        assert!(with(".example.com", "https://api.example.com"));
        assert!(with("example.com", "https://example.com"));
        assert!(!with("example.com", "https://notexample.com"));
        assert!(with("10.0.0.0/8", "https://10.1.2.3:6443"));
        assert!(!with("10.0.0.0/8", "https://11.1.2.3:6443"));
        assert!(with("10.1.2.3", "https://10.1.2.3:6443"));
        assert!(with("api.internal:6443", "https://api.internal:6443"));
        assert!(!with("api.internal:443", "https://api.internal:6443"));
        assert!(with("*", "https://anything"));
        assert!(with(" foo , api.internal ", "https://api.internal"));
    }

    #[test]
    fn a_kubeconfig_s_proxy_wins_over_the_environment() {
        let mut config = kube::Config::new("https://10.0.0.1:6443".parse().unwrap());
        config.proxy_url = Some("http://corporate:3128".parse().unwrap());
        apply_environment(&mut config, env(&[("HTTPS_PROXY", "http://other:1")]));
        assert_eq!(config.proxy_url.unwrap().to_string(), "http://corporate:3128/");

        let mut config = kube::Config::new("http://127.0.0.1:8080".parse().unwrap());
        config.proxy_url = Some("http://proxy:3128".parse().unwrap());
        apply_environment(&mut config, env(&[("HTTPS_PROXY", "http://proxy:3128")]));
        assert_eq!(
            config.proxy_url, None,
            "kube's choice from HTTPS_PROXY, for loopback, is undone"
        );
    }
}
