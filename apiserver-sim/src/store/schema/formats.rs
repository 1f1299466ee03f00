//! The string `format`s kube-apiserver checks in a custom resource, as its OpenAPI format registry reads them; any other format is taken as written.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;

/// Whether `text` is of `format`. Unknown formats accept every string.
pub(super) fn valid(format: &str, text: &str) -> bool {
    match format {
        "ipv4" => text.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<Ipv6Addr>().is_ok(),
        "cidr" => cidr(text),
        "mac" => mac(text),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => uuid(text),
        "hostname" => hostname(text),
        "email" => email(text),
        "uri" => uri(text),
        "byte" => base64::engine::general_purpose::STANDARD.decode(text).is_ok(),
        "date" => date(text),
        "date-time" | "datetime" => text.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
        "duration" => duration(text),
        _ => true,
    }
}

fn cidr(text: &str) -> bool {
    let Some((address, prefix)) = text.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => prefix <= 32,
        Ok(IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

fn mac(text: &str) -> bool {
    let parts: Vec<&str> = text.split([':', '-']).collect();
    matches!(parts.len(), 6 | 8 | 20)
        && parts
            .iter()
            .all(|part| part.len() == 2 && part.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|group| group.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|group| group.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// An RFC 1123 host name: dot-separated labels of letters, digits and
/// inner hyphens, 63 bytes each, 255 in all.
fn hostname(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 255
        && text.trim_end_matches('.').split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn email(text: &str) -> bool {
    text.rsplit_once('@')
        .is_some_and(|(local, domain)| !local.is_empty() && !local.contains(char::is_whitespace) && hostname(domain))
}

fn uri(text: &str) -> bool {
    text.split_once(':').is_some_and(|(scheme, rest)| {
        !rest.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            && !text.contains(char::is_whitespace)
    })
}

fn date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let [year, month, day] = parts[..] else {
        return false;
    };
    let number = |part: &str, digits: usize| {
        (part.len() == digits && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse::<u32>().ok())
            .flatten()
    };
    matches!(
        (number(year, 4), number(month, 2), number(day, 2)),
        (Some(_), Some(1..=12), Some(1..=31))
    )
}

/// A Go duration: numbers with units, `1h30m`, `2.5s`, `300ms`.
fn duration(text: &str) -> bool {
    let mut rest = text.strip_prefix(['-', '+']).unwrap_or(text);
    if rest == "0" {
        return true;
    }
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .iter()
            .filter(|unit| rest.starts_with(**unit))
            .max_by_key(|unit| unit.len())
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_accept_what_they_name_and_refuse_the_rest() {
        for (format, good, bad) in [
            ("ipv4", "10.0.0.1", "10.0.0.300"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/40"),
            ("email", "ops@example.com", "ops at example"),
            ("hostname", "web-1.example.com", "-web"),
            ("uuid", "7c9e6679-7425-40de-944b-e07fc1f90ae7", "7c9e6679"),
            ("date-time", "2026-01-02T03:04:05Z", "yesterday"),
            ("date", "2026-01-02", "2026-13-02"),
            ("duration", "1h30m", "ninety minutes"),
            ("uri", "https://example.com/x", "no scheme"),
        ] {
            assert!(valid(format, good), "{format} refused {good}");
            assert!(!valid(format, bad), "{format} took {bad}");
        }
        assert!(valid("made-up", "anything"));
    }
}
