//! The HTTP surface: Kubernetes REST paths, discovery, `metrics.k8s.io`, and the `/sim` control API.
//!
//! What is answered rather than stored (reviews, tokens, evictions, what a
//! kubelet serves) is in `unstored`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use kinformer_selector::Selector;
use serde_json::{Value, json};

use crate::auth::{self, Attributes, Refusal, User};
use crate::negotiation::Representation;
use crate::status::{ApiError, Result};
use crate::store::{Filter, ListOptions, Part, PatchType, Preconditions, ResourceId, StoredObject, WriteOptions};
use crate::watch::{self, EventForm, Start, WatchRequest};
use crate::{Shared, health, metrics, printers, protobuf, resources, server_stats};

mod respond;
mod unstored;

use respond::{
    aggregated_discovery_response, bytes_response, error_response, go_type, json_response, list_response,
    text_response, without_type_meta,
};

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let query: HashMap<String, String> = query
        .as_deref()
        .map(|query| serde_urlencoded::from_str(query).unwrap_or_default())
        .unwrap_or_default();
    let path = uri.path().trim_end_matches('/');
    if let Some(control) = path.strip_prefix("/sim/") {
        return sim_control(&shared, &method, control, &query);
    }
    shared.stats.request();
    if let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
    {
        shared.faults.hold_if_cut_off(token).await;
    }
    if let Some(latency) = shared.faults.take_latency() {
        tokio::time::sleep(latency).await;
    }
    if let Some(code) = shared.faults.take_failure() {
        return error_response(&ApiError::injected(code));
    }
    let whole_uri = uri.path_and_query().map_or_else(|| uri.path(), |whole| whole.as_str());
    let user = match auth::identify(&shared, &headers, whole_uri) {
        Ok(user) => user,
        Err(Refusal::Status(error)) => return error_response(&error),
        Err(Refusal::InternalError(text)) => return text_response(StatusCode::INTERNAL_SERVER_ERROR, text),
    };
    let attributes = Attributes::of_request(&method, uri.path(), &query);
    if let Some(resource) = &attributes.resource {
        let id = ResourceId::new(&resource.group, &resource.version, &resource.resource);
        shared.stats.resource_request(&id, &resource.namespace);
    }
    if let Err(forbidden) = shared.authorizer().authorize(&user, &attributes) {
        return error_response(&forbidden);
    }
    let request = Request {
        shared: &shared,
        user: &user,
        method: &method,
        path,
        headers: &headers,
        query: &query,
        body: &body,
    };
    let response = match request.serve() {
        Ok(response) => response,
        Err(error) => error_response(&error),
    };
    shared
        .stats
        .by_request
        .record(request_labels(&attributes, path, response.status().as_u16()));
    response
}

/// What `/metrics` counts a request by: its verb as kube-apiserver names it
/// (`LIST`, `WATCH`, `POST`, …), the resource it addresses, and the code.
fn request_labels(attributes: &Attributes, path: &str, code: u16) -> health::RequestLabels {
    let verb = match attributes.verb.as_str() {
        _ if attributes.resource.is_none() => match attributes.verb.as_str() {
            "get" => "GET",
            "post" => "POST",
            _ => "OTHER",
        },
        "watch" => "WATCH",
        "get" => "GET",
        "list" => "LIST",
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" => "DELETE",
        "deletecollection" => "DELETECOLLECTION",
        _ => "OTHER",
    };
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments[..] {
        ["api", version, ref rest @ ..] => ("", version, rest),
        ["apis", group, version, ref rest @ ..] => (group, version, rest),
        _ => ("", "", &[][..]),
    };
    let rest = match rest {
        ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    health::RequestLabels {
        verb,
        group: group.to_owned(),
        version: version.to_owned(),
        resource: rest.first().map(|s| (*s).to_owned()).unwrap_or_default(),
        subresource: rest.get(2).map(|s| (*s).to_owned()).unwrap_or_default(),
        code,
    }
}

struct Request<'a> {
    shared: &'a Arc<Shared>,
    /// Whom the request acts as.
    user: &'a User,
    method: &'a Method,
    path: &'a str,
    headers: &'a HeaderMap,
    query: &'a HashMap<String, String>,
    body: &'a Bytes,
}

/// What a resource path addresses.
struct Target {
    id: ResourceId,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Request<'_> {
    fn serve(&self) -> Result<Response> {
        let segments: Vec<&str> = self.path.split('/').filter(|s| !s.is_empty()).collect();
        let store = &self.shared.store;
        if let Some((endpoint, check)) = health::endpoint(self.path) {
            let body = health::check(endpoint, check, self.query.contains_key("verbose"))?;
            return Ok(text_response(StatusCode::OK, body));
        }
        match segments[..] {
            ["version"] => Ok(json_response(StatusCode::OK, &resources::version())),
            ["metrics"] => Ok(text_response(StatusCode::OK, health::metrics(self.shared))),
            ["openapi", "v2"] => Ok(bytes_response(StatusCode::OK, self.shared.openapi.v2(store))),
            ["openapi", "v3"] => Ok(bytes_response(StatusCode::OK, self.shared.openapi.v3_index(store))),
            ["openapi", "v3", ref rest @ ..] => self
                .shared
                .openapi
                .v3_document(store, &rest.join("/"))
                .map(|document| bytes_response(StatusCode::OK, document))
                .ok_or_else(|| ApiError::no_route(self.path)),
            ["api"] if self.wants(&[Representation::GroupDiscoveryList]) == Representation::GroupDiscoveryList => {
                let core = self.group_version_lists("", &["v1".to_owned()]);
                Ok(aggregated_discovery_response(&[(String::new(), core)]))
            }
            ["api"] => Ok(json_response(
                StatusCode::OK,
                &resources::core_versions(&self.shared.address.to_string()),
            )),
            ["apis"] => {
                let defs = store.defs();
                let mut list = resources::group_list(defs.iter().map(|d| &**d));
                // An aggregated API is listed after the built-in groups.
                if let Some(groups) = list["groups"].as_array_mut() {
                    groups.push(metrics::api::group());
                }
                if self.wants(&[Representation::GroupDiscoveryList]) != Representation::GroupDiscoveryList {
                    return Ok(json_response(StatusCode::OK, &list));
                }
                let groups: Vec<(String, Vec<Value>)> = list["groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|group| {
                        let name = group["name"].as_str().unwrap_or_default().to_owned();
                        let versions: Vec<String> = group["versions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|version| Some(version["version"].as_str()?.to_owned()))
                            .collect();
                        let lists = self.group_version_lists(&name, &versions);
                        (name, lists)
                    })
                    .collect();
                Ok(aggregated_discovery_response(&groups))
            }
            ["apis", metrics::api::GROUP, ref rest @ ..] => self.metrics(rest),
            ["api", "v1"] => self.resource_list("", "v1"),
            ["apis", group, version] => self.resource_list(group, version),
            ["apis", group] => {
                let defs = store.defs();
                let list = resources::group_list(defs.iter().map(|d| &**d));
                let found = list["groups"]
                    .as_array()
                    .and_then(|groups| groups.iter().find(|g| g["name"] == group).cloned());
                match found {
                    Some(mut group) => {
                        group["kind"] = json!("APIGroup");
                        group["apiVersion"] = json!("v1");
                        Ok(json_response(StatusCode::OK, &group))
                    }
                    None => Err(ApiError::no_route(self.path)),
                }
            }
            ["api", "v1", ref rest @ ..] => self.resource("", "v1", rest),
            ["apis", group, version, ref rest @ ..] => self.resource(group, version, rest),
            _ => Err(ApiError::no_route(self.path)),
        }
    }

    /// `/apis/metrics.k8s.io/...`, as metrics-server answers behind the aggregator.
    fn metrics(&self, rest: &[&str]) -> Result<Response> {
        let request = metrics::api::Request {
            method: self.method,
            path: self.path,
            rest,
            query: self.query,
            table: self.wants_table(),
        };
        match metrics::api::serve(&self.shared.store, &request)? {
            metrics::api::Answer::Json(value) => Ok(json_response(StatusCode::OK, &value)),
            // The aggregator's answer is Go's `http.Error`: plain text, no Status.
            metrics::api::Answer::Unavailable => Ok(text_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable\n".to_owned(),
            )),
        }
    }

    fn resource_list(&self, group: &str, version: &str) -> Result<Response> {
        let list = self
            .group_version_list(group, version)
            .ok_or_else(|| ApiError::no_route(self.path))?;
        Ok(json_response(StatusCode::OK, &list))
    }

    /// The `APIResourceList` of a group version, if it is served.
    fn group_version_list(&self, group: &str, version: &str) -> Option<Value> {
        if group == metrics::api::GROUP {
            return Some(metrics::api::resource_list());
        }
        let defs = self.shared.store.defs();
        let defs: Vec<_> = defs
            .iter()
            .filter(|d| d.group == group && d.version == version)
            .collect();
        if defs.is_empty() {
            return None;
        }
        let group_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        Some(resources::resource_list(&group_version, defs.into_iter().map(|d| &**d)))
    }

    /// The `APIResourceList`s of a group's versions, in the order given.
    fn group_version_lists(&self, group: &str, versions: &[String]) -> Vec<Value> {
        versions
            .iter()
            .filter_map(|version| self.group_version_list(group, version))
            .collect()
    }

    /// The form of the answer the client asked for, of those `offered`.
    fn wants(&self, offered: &[Representation]) -> Representation {
        Representation::negotiate(self.headers, offered)
    }

    fn target(&self, group: &str, version: &str, rest: &[&str]) -> Result<Target> {
        let store = &self.shared.store;
        let id = |plural: &str| ResourceId::new(group, version, plural);
        let namespaced = |plural: &str| store.def(&id(plural)).is_some_and(|def| def.namespaced);
        let target = match *rest {
            ["namespaces", namespace, plural, ref tail @ ..] if !group.is_empty() || namespaced(plural) => Target {
                id: id(plural),
                namespace: Some(namespace.to_owned()),
                name: tail.first().map(|s| (*s).to_owned()),
                subresource: tail.get(1).map(|s| (*s).to_owned()),
            },
            [plural, ref tail @ ..] => Target {
                id: id(plural),
                namespace: None,
                name: tail.first().map(|s| (*s).to_owned()),
                subresource: tail.get(1).map(|s| (*s).to_owned()),
            },
            [] => return Err(ApiError::no_route(self.path)),
        };
        // A proxy subresource carries the proxied path after its name.
        let proxied = target.subresource.as_deref() == Some("proxy");
        if (rest.len() > 5 && !proxied) || store.def(&target.id).is_none() {
            return Err(ApiError::no_route(self.path));
        }
        Ok(target)
    }

    fn resource(&self, group: &str, version: &str, rest: &[&str]) -> Result<Response> {
        let target = self.target(group, version, rest)?;
        let store = &self.shared.store;
        let def = store.def(&target.id).ok_or_else(|| ApiError::no_route(self.path))?;
        if target.namespace.is_some() && !def.namespaced {
            return Err(ApiError::no_route(self.path));
        }
        let namespace = target.namespace.as_deref();
        if let Some(subresource) = target.subresource.as_deref()
            && !def.serves_subresource(subresource)
        {
            return Err(ApiError::no_route(self.path));
        }
        if let Some(response) = self.unstored_resource(&def, namespace, target.name.as_deref()) {
            return response;
        }
        if let (Some(name), Some(subresource)) = (target.name.as_deref(), target.subresource.as_deref())
            && let Some(response) = self.unstored_subresource(&def, namespace, name, subresource)
        {
            return response;
        }
        let part = match target.subresource.as_deref() {
            None => Part::Main,
            Some("status") => Part::Status,
            Some("scale") => Part::Scale,
            Some("approval") => Part::Approval,
            Some("ephemeralcontainers") => Part::EphemeralContainers,
            Some(_) => return Err(ApiError::no_route(self.path)),
        };
        let Some(name) = target.name.as_deref() else {
            // The collection.
            let filter = self.filter(namespace, &def)?;
            return match *self.method {
                Method::GET if self.flag("watch") => self.watch(target.id, def, filter),
                Method::GET => self.list(&target.id, &def, &filter),
                Method::POST => {
                    let options = self.write_options("CreateOptions", None)?;
                    let created = store
                        .transaction(options)
                        .create(&target.id, namespace, self.json_body()?)?;
                    self.object_answer(StatusCode::CREATED, &def, &created)
                }
                Method::DELETE => {
                    let options = self.write_options("DeleteOptions", Some(&self.delete_options()?))?;
                    let deleted = store.transaction(options).delete_collection(&target.id, &filter)?;
                    self.list_answer(&def, store.resource_version(), None, &deleted)
                }
                _ => Err(ApiError::method_not_allowed(format!(
                    "{} is not allowed on a collection",
                    self.method
                ))),
            };
        };
        let id = &target.id;
        match (self.method.clone(), part) {
            (Method::GET, Part::Scale) => {
                let scale = store.transaction(WriteOptions::default()).scale(id, namespace, name)?;
                Ok(json_response(StatusCode::OK, &scale))
            }
            (Method::GET, _) => self.object_answer(StatusCode::OK, &def, &store.get(id, namespace, name)?),
            (Method::PUT, Part::Scale) => {
                let options = self.write_options("UpdateOptions", None)?;
                let scale = store
                    .transaction(options)
                    .update_scale(id, namespace, name, self.json_body()?)?;
                Ok(json_response(StatusCode::OK, &scale))
            }
            (Method::PUT, part) => {
                let options = self.write_options("UpdateOptions", None)?;
                let updated = store
                    .transaction(options)
                    .update_part(id, namespace, name, self.json_body()?, part)?;
                self.object_answer(StatusCode::OK, &def, &updated)
            }
            (Method::PATCH, part) => {
                let content_type = self
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                let patch_type = PatchType::from_content_type(content_type)?;
                let options = self.patch_options(patch_type)?;
                let patch = self.patch_body(patch_type)?;
                let mut transaction = store.transaction(options);
                if part == Part::Scale {
                    let scale = transaction.patch_scale(id, namespace, name, patch_type, patch)?;
                    return Ok(json_response(StatusCode::OK, &scale));
                }
                let existed = transaction.get(id, namespace, name).is_ok();
                let patched = transaction.patch_part(id, namespace, name, patch_type, patch, part)?;
                let code = if existed { StatusCode::OK } else { StatusCode::CREATED };
                self.object_answer(code, &def, &patched)
            }
            (Method::DELETE, Part::Main) => {
                let options = self.delete_options()?;
                let preconditions = Preconditions {
                    uid: options["preconditions"]["uid"].as_str().map(str::to_owned),
                    resource_version: options["preconditions"]["resourceVersion"].as_str().map(str::to_owned),
                };
                let write_options = self.write_options("DeleteOptions", Some(&options))?;
                let deleted = store
                    .transaction(write_options)
                    .delete(id, namespace, name, &preconditions)?;
                let finalizing = deleted.value["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|finalizers| !finalizers.is_empty());
                if finalizing || def.returns_deleted_object {
                    return self.object_answer(StatusCode::OK, &def, &deleted);
                }
                let uid = deleted.value["metadata"]["uid"].as_str().unwrap_or_default();
                Ok(json_response(
                    StatusCode::OK,
                    &crate::status::deleted(&def.group, &def.plural, name, uid),
                ))
            }
            _ => Err(ApiError::method_not_allowed(format!(
                "{} is not allowed here",
                self.method
            ))),
        }
    }

    /// A delete's `DeleteOptions` body (`null` when there is none).
    fn delete_options(&self) -> Result<Value> {
        if self.body.is_empty() {
            Ok(Value::Null)
        } else {
            self.json_body()
        }
    }

    /// The options of a write, checked as the API server checks `kind`
    /// (`CreateOptions`, `UpdateOptions`, `PatchOptions`, `DeleteOptions`):
    /// `dryRun` from the query or a delete's body, `fieldManager`.
    ///
    /// An unknown `dryRun` value or a bad field manager is 422, as from a real
    /// server.
    fn write_options(&self, kind: &str, delete_body: Option<&Value>) -> Result<WriteOptions> {
        let mut dry_run: Vec<&str> = self.query.get("dryRun").map(String::as_str).into_iter().collect();
        if let Some(values) = delete_body.and_then(|body| body["dryRun"].as_array()) {
            dry_run.extend(values.iter().map(|value| value.as_str().unwrap_or_default()));
        }
        if let Some(unsupported) = dry_run.iter().find(|value| **value != "All") {
            return Err(ApiError::invalid_options(
                kind,
                &format!("dryRun: Unsupported value: []string{{{unsupported:?}}}: supported values: \"All\""),
            ));
        }
        let strict = self.query.get("fieldValidation").is_some_and(|level| level == "Strict");
        let mut options = WriteOptions::default().dry_run(!dry_run.is_empty()).strict(strict);
        if let Some(manager) = self.query.get("fieldManager").filter(|manager| !manager.is_empty()) {
            if manager.len() > 128 {
                return Err(ApiError::invalid_options(
                    kind,
                    "fieldManager: Too long: may not be more than 128 bytes",
                ));
            }
            if let Some((position, character)) = manager.char_indices().find(|(_, c)| c.is_control()) {
                return Err(ApiError::invalid_options(
                    kind,
                    &format!(
                        "fieldManager: Invalid value: {manager:?}: invalid character {character:?} (at position {position})"
                    ),
                ));
            }
            options = options.field_manager(manager.clone());
        }
        Ok(options)
    }

    /// A patch's options: as [`Request::write_options`], and `force`, which only
    /// an apply takes.
    fn patch_options(&self, patch_type: PatchType) -> Result<WriteOptions> {
        let options = self.write_options("PatchOptions", None)?;
        let Some(force) = self.query.get("force") else {
            return Ok(options);
        };
        if patch_type != PatchType::Apply {
            return Err(ApiError::invalid_options(
                "PatchOptions",
                "force: Forbidden: may not be specified for non-apply patch",
            ));
        }
        Ok(options.force(query_flag(Some(force))))
    }

    /// A patch's body. An apply configuration is YAML; the JSON that kube-rs and
    /// kubectl send is YAML too, and the only form read here.
    fn patch_body(&self, patch_type: PatchType) -> Result<Value> {
        match patch_type {
            PatchType::Apply => serde_json::from_slice(self.body).map_err(|error| {
                ApiError::bad_request(format!(
                    "the apply configuration is not JSON (YAML apply configurations other than JSON are not supported by this emulation): {error}"
                ))
            }),
            _ => self.json_body(),
        }
    }

    fn flag(&self, name: &str) -> bool {
        query_flag(self.query.get(name))
    }

    /// The request's body as JSON: read as JSON, or decoded from protobuf
    /// when its `Content-Type` says so.
    fn json_body(&self) -> Result<Value> {
        let content_type = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        if content_type.split(';').next().map(str::trim) == Some(protobuf::MEDIA_TYPE) {
            return protobuf::decode(self.body);
        }
        serde_json::from_slice(self.body)
            .map_err(|error| ApiError::bad_request(format!("the request body is not valid JSON: {error}")))
    }

    fn filter(&self, namespace: Option<&str>, def: &resources::ResourceDef) -> Result<Filter> {
        let mut filter = Filter {
            namespace: namespace.map(str::to_owned),
            ..Filter::default()
        };
        if let Some(selector) = self.query.get("labelSelector") {
            filter.labels = Selector::parse(selector).map_err(|error| ApiError::bad_request(error.to_string()))?;
        }
        if let Some(selector) = self.query.get("fieldSelector") {
            filter.parse_fields(selector, &def.kind, def.stored_as)?;
        }
        Ok(filter)
    }

    fn list(&self, id: &ResourceId, def: &resources::ResourceDef, filter: &Filter) -> Result<Response> {
        let options = ListOptions {
            limit: self.query.get("limit").and_then(|limit| limit.parse().ok()),
            continue_token: self.query.get("continue").filter(|c| !c.is_empty()).cloned(),
            resource_version: self.query.get("resourceVersion").cloned(),
            resource_version_match: self
                .query
                .get("resourceVersionMatch")
                .filter(|m| !m.is_empty())
                .cloned(),
        };
        let page = self.shared.store.list(id, filter, &options)?;
        if self.wants_table() {
            let items: Vec<&Value> = page.items.iter().map(|item| &item.value).collect();
            let table = printers::table(
                def,
                printers::Page {
                    resource_version: Some(page.resource_version),
                    continue_token: page.continue_token.as_deref(),
                },
                &items,
            );
            return Ok(json_response(StatusCode::OK, &table));
        }
        self.list_answer(def, page.resource_version, page.continue_token.as_deref(), &page.items)
    }

    /// An object in the form the client asked for: itself, its metadata
    /// only, or a Table of it. Asking for a list of metadata is 406, as the API server answers.
    fn object_answer(
        &self,
        code: StatusCode,
        def: &resources::ResourceDef,
        object: &Arc<StoredObject>,
    ) -> Result<Response> {
        let offered = [
            Representation::PartialObjectMetadata,
            Representation::PartialObjectMetadataList,
            Representation::Table,
        ];
        match self.wants(&offered) {
            Representation::PartialObjectMetadata => Ok(bytes_response(code, object.partial_metadata_json())),
            Representation::Table => Ok(json_response(
                code,
                &printers::table(def, printers::Page::default(), &[&object.value]),
            )),
            Representation::PartialObjectMetadataList => Err(ApiError::not_acceptable(format!(
                "you requested PartialObjectMetadataList, but the requested object is not a list (*{})",
                go_type(def, &def.kind)
            ))),
            _ => Ok(bytes_response(code, object.json.clone())),
        }
    }

    /// A list in the form the client asked for: the objects, or their metadata
    /// only. Asking for one object's metadata is 406, as the API server answers.
    fn list_answer(
        &self,
        def: &resources::ResourceDef,
        rv: u64,
        continue_token: Option<&str>,
        items: &[Arc<StoredObject>],
    ) -> Result<Response> {
        let offered = [
            Representation::PartialObjectMetadata,
            Representation::PartialObjectMetadataList,
        ];
        match self.wants(&offered) {
            Representation::PartialObjectMetadataList => Ok(list_response(
                "PartialObjectMetadataList",
                "meta.k8s.io/v1",
                rv,
                continue_token,
                items.iter().map(|item| item.partial_metadata_json()),
            )),
            Representation::PartialObjectMetadata => Err(ApiError::not_acceptable(format!(
                "you requested PartialObjectMetadata, but the requested object is a list (*{})",
                go_type(def, &def.list_kind())
            ))),
            _ => Ok(list_response(
                &def.list_kind(),
                &def.api_version(),
                rv,
                continue_token,
                items.iter().map(|item| {
                    let json = item.json.clone();
                    if def.custom { json } else { without_type_meta(json) }
                }),
            )),
        }
    }

    /// kubectl asks for server-side printed tables.
    fn wants_table(&self) -> bool {
        self.wants(&[Representation::Table]) == Representation::Table
    }

    fn watch(&self, id: ResourceId, def: Arc<resources::ResourceDef>, filter: Filter) -> Result<Response> {
        let rv = self
            .query
            .get("resourceVersion")
            .map(String::as_str)
            .unwrap_or_default();
        let bookmarks = self.flag("allowWatchBookmarks");
        let start = if self.flag("sendInitialEvents") {
            Start::CurrentState {
                end_bookmark: bookmarks,
            }
        } else if rv.is_empty() || rv == "0" {
            Start::CurrentState { end_bookmark: false }
        } else {
            let rv: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?;
            let current = self.shared.store.resource_version();
            if rv > current {
                return Err(ApiError::too_large_resource_version(rv, current));
            }
            Start::After(rv)
        };
        let timeout = self
            .query
            .get("timeoutSeconds")
            .and_then(|seconds| seconds.parse().ok())
            .map(Duration::from_secs);
        // Both metadata forms are taken for a watch: its events carry
        // `PartialObjectMetadata` objects. A Table watch's carry one row each.
        let offered = [
            Representation::PartialObjectMetadata,
            Representation::PartialObjectMetadataList,
            Representation::Table,
        ];
        let form = match self.wants(&offered) {
            Representation::Plain => EventForm::Object,
            Representation::Table => EventForm::Table,
            _ => EventForm::Metadata,
        };
        let request = WatchRequest {
            id,
            def,
            filter,
            start,
            bookmarks,
            timeout,
            form,
        };
        let chunks = watch::spawn(Arc::clone(self.shared), request);
        let stream = futures::stream::unfold(chunks, |mut chunks| async move {
            let chunk = chunks.recv().await?;
            Some((Ok::<_, std::convert::Infallible>(chunk), chunks))
        });
        let mut response = Response::new(Body::from_stream(stream));
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(response)
    }
}

/// The `/sim` control API: faults and counters, for people poking a running
/// emulation with curl.
fn sim_control(shared: &Shared, method: &Method, path: &str, query: &HashMap<String, String>) -> Response {
    let faults = &shared.faults;
    let number = |name: &str, default: u64| query.get(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    match (method, path) {
        (&Method::GET, "stats") => json_response(StatusCode::OK, &json!(server_stats(shared))),
        (&Method::POST, "faults/close-watches") => {
            faults.close_watches();
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::POST, "faults/expire-next-watch") => {
            faults.expire_next_watch();
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::POST, "faults/fail") => {
            faults.fail_next_requests(number("count", 1), number("code", 500) as u16);
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::POST, "faults/hang") => {
            faults.hang_watches(query.get("on").is_none_or(|on| on != "false"));
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::POST, "faults/cut-off") => {
            let token = query.get("token").map_or("", String::as_str);
            faults.cut_off(token, query.get("on").is_none_or(|on| on != "false"));
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::POST, "faults/latency") => {
            faults.set_latency(Duration::from_millis(number("ms", 0)));
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::POST, "metrics/available") => {
            shared
                .store
                .metrics()
                .set_available(query.get("on").is_none_or(|on| on != "false"));
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::POST, "compact") => {
            shared.store.compact();
            StatusCode::NO_CONTENT.into_response()
        }
        _ => error_response(&ApiError::no_route(&format!("/sim/{path}"))),
    }
}

/// A boolean query parameter as kube-apiserver reads one: absent, `0` and
/// `false` (in any case) are false, every other value true, `watch=True` (as
/// the Python client sends it) and `watch=` among them.
pub(crate) fn query_flag(value: Option<&String>) -> bool {
    value.is_some_and(|value| value != "0" && !value.eq_ignore_ascii_case("false"))
}
