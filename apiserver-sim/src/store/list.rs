//! List queries: the objects a filter selects, now or at an older resourceVersion, one page at a time.
//!
//! An older state is rebuilt from the event log (the objects changed since then,
//! as they were then), so a paged list is one consistent snapshot however the
//! objects change between its pages, until compaction drops what it needs.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::{Collection, Filter, ResourceId, Store, StoredObject, collection, continue_token, conversion};
use crate::status::{ApiError, Result};

/// How a list picks the resourceVersion it is served at.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// At most this many items; the rest come with a continue token.
    pub limit: Option<usize>,
    /// A continue token from a previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`: `Exact` or `NotOlderThan`.
    pub resource_version_match: Option<String>,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// The items, ordered by key.
    pub items: Vec<Arc<StoredObject>>,
    /// The resourceVersion the list was served at.
    pub resource_version: u64,
    /// The token for the next page, when there is one.
    pub continue_token: Option<String>,
}

impl Store {
    /// One page of the objects `filter` selects.
    ///
    /// # Errors
    ///
    /// 410 for a continue token or exact resourceVersion older than the
    /// compaction window, 504 for a resourceVersion from the future, 400 for a
    /// malformed token.
    pub fn list(&self, id: &ResourceId, filter: &Filter, options: &ListOptions) -> Result<ListPage> {
        let state = self.lock();
        let conversion = conversion(&state, id);
        let collection = collection(&state, id)?;
        let current = state.resource_version;
        let requested = options
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty())
            .map(parse_rv)
            .transpose()?;
        let (at, after_key) = match &options.continue_token {
            Some(token) => {
                let (rv, key) = continue_token::decode(token)?;
                if rv < collection.compacted {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some(key))
            }
            None => match (requested, options.resource_version_match.as_deref()) {
                (Some(rv), _) if rv > current => return Err(ApiError::too_large_resource_version(rv, current)),
                (Some(rv), Some("Exact")) => {
                    if rv < collection.compacted {
                        return Err(ApiError::expired(format!(
                            "too old resource version: {rv} ({})",
                            collection.compacted
                        )));
                    }
                    (rv, None)
                }
                (None, Some(_)) => {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                _ => (current, None),
            },
        };

        let then = if at < current {
            changed_since(collection, at)
        } else {
            BTreeMap::new()
        };
        let lower = after_key.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let now = collection
            .objects
            .range::<str, _>((lower, Bound::Unbounded))
            .map(|(key, object)| (key.as_str(), Some(object)));
        let past = then
            .range::<str, _>((lower, Bound::Unbounded))
            .map(|(key, object)| (*key, *object));
        let limit = options.limit.filter(|limit| *limit > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut more = false;
        for (_, object) in merge_overlay(now, past) {
            let Some(object) = object else { continue };
            if !filter.matches(object) {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(object.converted(conversion));
        }
        let continue_token = more.then(|| continue_token::encode(at, &items.last().expect("a full page").key));
        Ok(ListPage {
            items,
            resource_version: at,
            continue_token,
        })
    }

    /// The objects `filter` selects now, with the resourceVersion they are at.
    ///
    /// # Errors
    ///
    /// 404 when the resource does not exist.
    pub fn snapshot(&self, id: &ResourceId, filter: &Filter) -> Result<(Vec<Arc<StoredObject>>, u64)> {
        let state = self.lock();
        let conversion = conversion(&state, id);
        let collection = collection(&state, id)?;
        let objects = collection
            .objects
            .values()
            .filter(|o| filter.matches(o))
            .map(|o| o.converted(conversion))
            .collect();
        Ok((objects, state.resource_version))
    }
}

/// The state at `rv` differs from the current one for the keys changed after
/// it: each maps to its state at `rv` (`None`: absent then).
fn changed_since(collection: &Collection, rv: u64) -> BTreeMap<&str, Option<&Arc<StoredObject>>> {
    let start = collection.log.partition_point(|event| event.resource_version <= rv);
    let mut then = BTreeMap::new();
    for event in collection.log.range(start..) {
        then.entry(event.object.key.as_str()).or_insert(event.previous.as_ref());
    }
    then
}

/// Merges the current objects with the overlay of past states, both ordered by key;
/// the overlay wins.
fn merge_overlay<'a>(
    now: impl Iterator<Item = (&'a str, Option<&'a Arc<StoredObject>>)>,
    past: impl Iterator<Item = (&'a str, Option<&'a Arc<StoredObject>>)>,
) -> impl Iterator<Item = (&'a str, Option<&'a Arc<StoredObject>>)> {
    let mut now = now.peekable();
    let mut past = past.peekable();
    std::iter::from_fn(move || match (now.peek(), past.peek()) {
        (Some((a, _)), Some((b, _))) if a < b => now.next(),
        (Some((a, _)), Some((b, _))) if a == b => {
            now.next();
            past.next()
        }
        (Some(_), Some(_)) | (None, Some(_)) => past.next(),
        (Some(_), None) => now.next(),
        (None, None) => None,
    })
}

fn parse_rv(rv: &str) -> Result<u64> {
    rv.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::PatchType;

    use crate::store::test_store as store;

    #[test]
    fn an_exact_list_serves_the_state_at_that_resource_version() {
        let (store, configmaps) = store();
        store
            .create(
                &configmaps,
                Some("a"),
                json!({"metadata": {"name": "x"}, "data": {"v": "1"}}),
            )
            .unwrap();
        let then = store.resource_version();
        store
            .patch(
                &configmaps,
                Some("a"),
                "x",
                PatchType::Merge,
                json!({"data": {"v": "2"}}),
                false,
            )
            .unwrap();
        store
            .create(&configmaps, Some("a"), json!({"metadata": {"name": "y"}}))
            .unwrap();
        let options = ListOptions {
            resource_version: Some(then.to_string()),
            resource_version_match: Some("Exact".into()),
            ..ListOptions::default()
        };
        let page = store.list(&configmaps, &Filter::default(), &options).unwrap();
        assert_eq!(page.resource_version, then);
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].value["data"]["v"], "1");
        store.compact();
        assert_eq!(
            store.list(&configmaps, &Filter::default(), &options).unwrap_err().code,
            410
        );
    }
}
