//! A plugin that misbehaves on purpose, to show the host contains it.
//!
//! Its config is `MODE` or `MODE:apiVersion/Kind` (pods by default):
//!
//! - `loop`: spins forever in every `handle` call.
//! - `sleep`: sleeps for an hour in every `handle` call (a blocking WASI call).
//! - `bomb`: allocates without bound in every `handle` call.
//! - `trap-every-3rd`: panics (a trap) on every 3rd delta it receives.
//! - `reject`: returns an error from every `handle` call.
//! - `refuse`: returns an error from `init`.
//! - `huge-queries`: lists the whole cache and every index value per delta,
//!   logging how much came back.
//! - `nonsense`: passes malformed arguments to every host function per delta,
//!   logging which error each answered.
//! - `spy=NAMESPACE`: tries every path to objects in `NAMESPACE` (get, list,
//!   list in that namespace, by index, index values), logging what it saw, and
//!   logs each delta's key.
//! - `print`: writes each delta's key to stdout and a line to stderr.
//! - `squat`: declares its index `node` on another field (`status.hostIP`)
//!   than node-watcher's, and behaves.
//! - `indexes=N`: declares `N` indexes, and behaves.
//! - `record=LABEL`: behaves, logging `LABEL TYPE KEY RV` for every delta
//!   (`initial` appended for initial-list deltas), so tests can tell which
//!   version handled what.
//! - `fetch=URL`: GETs `URL` per delta, logging `fetch STATUS BYTES` or
//!   `fetch error KIND: MESSAGE`.
//! - `sequential=N@URL`: on its first delta, GETs `URL` `N` times one after
//!   the other, logging `sequential ok=.. failed=.. ns=..` (the benchmark's
//!   outbound row).
//! - `flood=URL`: GETs `URL` 50 times per delta, logging how each ended
//!   (`flood ok=.. throttled=.. other=..`).
//! - `burst=N@URL`: starts `N` requests to `URL` at once per delta, then
//!   waits for them all, logging how each ended (`burst ok=.. throttled=..`).
//! - `env=NAME`: logs `env NAME=VALUE` (or `env NAME unset`) per delta.
//! - `read=apiVersion/Kind`: lists the resource from the API server, uncached,
//!   per delta, logging `read N items` or `read error KIND`.
//! - `hoard`: makes 100 `wasi:http` header fields of 60 KiB per delta and
//!   never drops them (memory the host holds, not the plugin), logging
//!   `hoard N` with how many it holds.
//! - `hold=URL`: GETs `URL` per delta, takes the response's headers and
//!   keeps the response forever without reading its body, logging
//!   `hold STATUS` (or `hold error KIND`).
//!
//! A config with a URL in it watches pods.

use kinformer_sdk::cache::{self, CacheError};
use kinformer_sdk::{Delta, Error, Gvk, Handler, Registration, Result, info};

struct Hostile {
    mode: String,
    gvk: Gvk,
    deltas: u64,
}

impl Handler for Hostile {
    fn init(config: &str) -> Result<(Self, Registration)> {
        let (mode, resource) = if config.contains("://") {
            (config, "v1/Pod")
        } else {
            config.split_once(':').unwrap_or((config, "v1/Pod"))
        };
        let gvk = match resource.rsplit_once('/') {
            Some((api_version, kind)) => match api_version.split_once('/') {
                Some((group, version)) => Gvk::new(group, version, kind),
                None => Gvk::new("", api_version, kind),
            },
            None => return Err(Error::msg(format!("bad resource {resource:?}"))),
        };
        if mode == "refuse" {
            return Err(Error::msg("refusing to start, as configured"));
        }
        let mut registration = Registration::new("hostile", env!("CARGO_PKG_VERSION")).watch(gvk.clone());
        registration = match mode.split_once('=') {
            _ if mode == "squat" => registration.index(gvk.clone(), "node", "status.hostIP"),
            Some(("indexes", count)) => {
                let count: u32 = count.parse().map_err(|_| Error::msg(format!("bad count {count:?}")))?;
                (0..count).fold(registration, |registration, i| {
                    registration.index(gvk.clone(), format!("i{i}"), format!("metadata.labels.l{i}"))
                })
            }
            _ => registration.index(gvk.clone(), "node", "spec.nodeName"),
        };
        let plugin = Self {
            mode: mode.to_owned(),
            gvk,
            deltas: 0,
        };
        Ok((plugin, registration))
    }

    fn handle(&mut self, delta: Delta) -> Result<()> {
        self.deltas += 1;
        match self.mode.as_str() {
            "loop" => spin(),
            "sleep" => std::thread::sleep(std::time::Duration::from_secs(3600)),
            "bomb" => bomb(),
            "trap-every-3rd" if self.deltas.is_multiple_of(3) => panic!("trapping on delta {}", self.deltas),
            "reject" => return Err(Error::msg(format!("rejecting {}", delta.key()))),
            "huge-queries" => self.huge_queries(),
            "nonsense" => self.nonsense(),
            spy if spy.starts_with("spy=") => {
                info!("delta {}", delta.key());
                self.spy(&spy["spy=".len()..]);
            }
            record if record.starts_with("record=") => {
                let initial = if delta.is_initial_list() { " initial" } else { "" };
                info!(
                    "{} {:?} {} {}{initial}",
                    &record["record=".len()..],
                    delta.delta_type(),
                    delta.key(),
                    delta.resource_version()
                );
            }
            fetch if fetch.starts_with("fetch=") => match kinformer_sdk::http::get(&fetch["fetch=".len()..]) {
                Ok(response) => info!("fetch {} {}", response.status(), response.bytes().len()),
                Err(error) => info!("fetch error {}: {}", error.kind(), error.message()),
            },
            flood if flood.starts_with("flood=") => {
                let mut outcomes = std::collections::BTreeMap::<&str, u32>::new();
                for _ in 0..50 {
                    let outcome = match kinformer_sdk::http::get(&flood["flood=".len()..]) {
                        Ok(_) => "ok",
                        Err(error) => error.kind(),
                    };
                    *outcomes.entry(outcome).or_default() += 1;
                }
                info!("flood {outcomes:?}");
            }
            sequential if sequential.starts_with("sequential=") => {
                static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
                if !DONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    sequential_requests(&sequential["sequential=".len()..]);
                }
            }
            burst if burst.starts_with("burst=") => burst_requests(&burst["burst=".len()..]),
            "hoard" => hoard(),
            hold if hold.starts_with("hold=") => hold_response(&hold["hold=".len()..]),
            env if env.starts_with("env=") => {
                let name = &env["env=".len()..];
                match std::env::var(name) {
                    Ok(value) => info!("env {name}={value}"),
                    Err(_) => info!("env {name} unset"),
                }
            }
            read if read.starts_with("read=") => {
                let resource = &read["read=".len()..];
                let (api_version, kind) = resource.rsplit_once('/').unwrap_or(("v1", resource));
                let gvk = match api_version.split_once('/') {
                    Some((group, version)) => Gvk::new(group, version, kind),
                    None => Gvk::new("", api_version, kind),
                };
                match kinformer_sdk::api::list(&gvk, None, None) {
                    Ok(items) => info!("read {} items", items.len()),
                    Err(error) => info!("read error {}", error.kind()),
                }
            }
            "print" => {
                println!("printed {}", delta.key());
                eprintln!("complained about {}", delta.key());
            }
            _ => {}
        }
        Ok(())
    }
}

/// `N@URL`: `N` requests, one after the other, timed.
fn sequential_requests(spec: &str) {
    let (count, url) = spec.split_once('@').unwrap_or(("10", spec));
    let count: usize = count.parse().unwrap_or(10);
    let (mut ok, mut failed) = (0, 0);
    let started = std::time::Instant::now();
    for _ in 0..count {
        match kinformer_sdk::http::get(url) {
            Ok(response) if response.is_success() => ok += 1,
            _ => failed += 1,
        }
    }
    let ns = started.elapsed().as_nanos();
    info!("sequential ok={ok} failed={failed} ns={ns}");
}

/// `N@URL`: `N` requests started at once, then awaited.
#[cfg(target_arch = "wasm32")]
fn burst_requests(spec: &str) {
    use wasip2::http::types::{ErrorCode, Fields, OutgoingRequest, Scheme};
    let (count, url) = spec.split_once('@').unwrap_or(("10", spec));
    let count: usize = count.parse().unwrap_or(10);
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut pending = Vec::new();
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..count {
        let request = OutgoingRequest::new(Fields::new());
        let _ = request.set_scheme(Some(&if scheme == "https" { Scheme::Https } else { Scheme::Http }));
        let _ = request.set_authority(Some(authority));
        let _ = request.set_path_with_query(Some(path));
        match wasip2::http::outgoing_handler::handle(request, None) {
            Ok(future) => pending.push(future),
            Err(code) => *outcomes.entry(format!("{code:?}")).or_default() += 1,
        }
    }
    for future in pending {
        future.subscribe().block();
        let outcome = match future.get() {
            Some(Ok(Ok(_))) => "ok".to_owned(),
            Some(Ok(Err(ErrorCode::ConnectionLimitReached))) => "throttled".to_owned(),
            Some(Ok(Err(code))) => format!("{code:?}"),
            _ => "gone".to_owned(),
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    info!("burst {outcomes:?}");
}

#[cfg(not(target_arch = "wasm32"))]
fn burst_requests(_spec: &str) {}

/// Header fields the host holds for the plugin, never dropped.
#[cfg(target_arch = "wasm32")]
fn hoard() {
    use wasip2::http::types::Fields;
    static HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let value = vec![b'a'; 60 * 1024];
    for _ in 0..100 {
        let fields = Fields::new();
        let _ = fields.append("x-hoard", &value);
        std::mem::forget(fields);
        HELD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    info!("hoard {}", HELD.load(std::sync::atomic::Ordering::Relaxed));
}

#[cfg(not(target_arch = "wasm32"))]
fn hoard() {}

/// A response whose headers were read and whose body never is.
#[cfg(target_arch = "wasm32")]
fn hold_response(url: &str) {
    use wasip2::http::types::{Fields, OutgoingRequest, Scheme};
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_scheme(Some(&if scheme == "https" { Scheme::Https } else { Scheme::Http }));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(if path.is_empty() { "/" } else { path }));
    match wasip2::http::outgoing_handler::handle(request, None) {
        Ok(future) => {
            future.subscribe().block();
            match future.get() {
                Some(Ok(Ok(response))) => {
                    info!("hold {}", response.status());
                    std::mem::forget(response);
                }
                Some(Ok(Err(code))) => info!("hold error {code:?}"),
                _ => info!("hold error gone"),
            }
            std::mem::forget(future);
        }
        Err(code) => info!("hold error {code:?}"),
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn hold_response(_url: &str) {}

fn spin() -> ! {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

fn bomb() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![1; 1 << 20]);
        std::hint::black_box(&hoard);
    }
}

/// The name of the error a query answered, or `ok`.
fn outcome<T>(result: &std::result::Result<T, CacheError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(CacheError::Denied(_)) => "denied",
        Err(CacheError::InvalidArgument(_)) => "invalid-argument",
        Err(CacheError::NotCached(_)) => "not-cached",
        Err(CacheError::UnknownIndex(_)) => "unknown-index",
        Err(_) => "other",
    }
}

impl Hostile {
    fn huge_queries(&self) {
        let all = cache::list(&self.gvk).limit(u32::MAX).fetch();
        let bytes: usize = all.iter().flat_map(|list| &list.objects).map(String::len).sum();
        let values = cache::index_values(&self.gvk, "node");
        info!(
            "huge query: {} objects, {bytes} bytes, truncated={}, {} node values",
            all.as_ref().map_or(0, |list| list.objects.len()),
            all.as_ref().is_ok_and(|list| list.truncated),
            values.map_or(0, |values| values.len())
        );
    }

    fn nonsense(&self) {
        let huge = "x".repeat(1 << 20);
        let empty = Gvk::new("", "", "");
        let answers = [
            ("empty-key", outcome(&cache::get(&self.gvk, ""))),
            ("huge-key", outcome(&cache::get(&self.gvk, &huge))),
            ("empty-gvk", outcome(&cache::get(&empty, "a/b"))),
            (
                "huge-kind",
                outcome(&cache::get(&Gvk::new("", "v1", huge.clone()), "a/b")),
            ),
            (
                "bad-selector",
                outcome(&cache::list(&self.gvk).label_selector("app in (web").fetch()),
            ),
            (
                "huge-selector",
                outcome(&cache::list(&self.gvk).label_selector(huge.clone()).fetch()),
            ),
            ("unknown-index", outcome(&cache::by_index(&self.gvk, "no-such", "x", 1))),
            (
                "control-chars",
                outcome(&cache::by_index(&self.gvk, "\0\u{1b}", "\0", 0)),
            ),
            ("huge-index", outcome(&cache::index_values(&self.gvk, &huge))),
        ];
        let summary: Vec<String> = answers
            .iter()
            .map(|(what, answer)| format!("{what}={answer}"))
            .collect();
        info!("nonsense: {}", summary.join(" "));
    }

    fn spy(&self, namespace: &str) {
        let get = cache::get(&self.gvk, &format!("{namespace}/any"));
        let listed = cache::list(&self.gvk).fetch();
        let namespaces: std::collections::BTreeSet<String> = listed
            .iter()
            .flat_map(|list| &list.objects)
            .filter_map(|json| {
                json.split("\"namespace\":\"")
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(str::to_owned)
            })
            .collect();
        let in_b = cache::list(&self.gvk).namespace(namespace).fetch();
        let by_index = cache::by_index(&self.gvk, "namespace", namespace, 0);
        let values = cache::index_values(&self.gvk, "namespace");
        info!(
            "spy: get={} list-namespaces={namespaces:?} list-in={} by-index={} namespace-values={:?}",
            outcome(&get),
            outcome(&in_b),
            by_index.map_or(usize::MAX, |list| list.objects.len()),
            values.unwrap_or_default()
        );
    }
}

kinformer_sdk::plugin!(Hostile);
