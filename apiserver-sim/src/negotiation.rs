//! Content negotiation: which form of an answer a request's `Accept` header asks for.

use axum::http::{HeaderMap, header};

/// A form the API server answers in, besides the plain object or list, as an
/// `Accept` entry names it with `as`, `g` and `v` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Representation {
    /// The object, list or document itself (`application/json`, `*/*`, no `Accept`).
    Plain,
    /// A `meta.k8s.io/v1` `Table` of rows, as kubectl prints them.
    Table,
    /// A `meta.k8s.io/v1` `PartialObjectMetadata`: the object's metadata only.
    PartialObjectMetadata,
    /// A `meta.k8s.io/v1` `PartialObjectMetadataList`: the listed objects' metadata only.
    PartialObjectMetadataList,
    /// An `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`: aggregated discovery.
    GroupDiscoveryList,
}

impl Representation {
    /// The first entry of the request's `Accept` header that is JSON and names
    /// one of `offered` (or no form at all: [`Representation::Plain`]).
    /// Entries in other media types, such as protobuf, or naming forms not
    /// offered here are passed over, as the API server passes over what it
    /// cannot serve; with none left, the answer is plain.
    pub(crate) fn negotiate(headers: &HeaderMap, offered: &[Self]) -> Self {
        let Some(accept) = headers.get(header::ACCEPT).and_then(|accept| accept.to_str().ok()) else {
            return Self::Plain;
        };
        accept
            .split(',')
            .filter_map(Self::of_entry)
            .find(|form| *form == Self::Plain || offered.contains(form))
            .unwrap_or(Self::Plain)
    }

    /// The form one `Accept` entry names, if it is JSON and a form known here.
    fn of_entry(entry: &str) -> Option<Self> {
        let mut parts = entry.split(';').map(str::trim);
        let media_type = parts.next().unwrap_or_default();
        if !matches!(media_type, "application/json" | "application/*" | "*/*") {
            return None;
        }
        let (mut form, mut group, mut version) = (None, None, None);
        for (name, value) in parts.filter_map(|part| part.split_once('=')) {
            match name.trim() {
                "as" => form = Some(value.trim()),
                "g" => group = Some(value.trim()),
                "v" => version = Some(value.trim()),
                _ => {}
            }
        }
        match (form, group, version) {
            (None, _, _) => Some(Self::Plain),
            (Some("Table"), Some("meta.k8s.io"), Some("v1")) => Some(Self::Table),
            (Some("PartialObjectMetadata"), Some("meta.k8s.io"), Some("v1")) => Some(Self::PartialObjectMetadata),
            (Some("PartialObjectMetadataList"), Some("meta.k8s.io"), Some("v1")) => {
                Some(Self::PartialObjectMetadataList)
            }
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => Some(Self::GroupDiscoveryList),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn accept(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn the_first_entry_this_server_offers_wins() {
        let kubectl = accept(
            "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
             application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        );
        let discovery = [Representation::GroupDiscoveryList];
        assert_eq!(
            Representation::negotiate(&kubectl, &discovery),
            Representation::GroupDiscoveryList
        );
        assert_eq!(Representation::negotiate(&kubectl, &[]), Representation::Plain);
    }

    #[test]
    fn an_older_version_of_a_form_falls_back_to_the_next_entry() {
        let old = accept("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json");
        assert_eq!(
            Representation::negotiate(&old, &[Representation::GroupDiscoveryList]),
            Representation::Plain
        );
        let table = accept("application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
        assert_eq!(
            Representation::negotiate(&table, &[Representation::Table]),
            Representation::Table
        );
        assert_eq!(Representation::negotiate(&HeaderMap::new(), &[]), Representation::Plain);
    }
}
