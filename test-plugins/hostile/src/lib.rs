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

use kinformer_sdk::cache::{self, CacheError};
use kinformer_sdk::{Delta, Error, Gvk, Handler, Registration, Result, info};

struct Hostile {
    mode: String,
    gvk: Gvk,
    deltas: u64,
}

impl Handler for Hostile {
    fn init(config: &str) -> Result<(Self, Registration)> {
        let (mode, resource) = config.split_once(':').unwrap_or((config, "v1/Pod"));
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
            "print" => {
                println!("printed {}", delta.key());
                eprintln!("complained about {}", delta.key());
            }
            _ => {}
        }
        Ok(())
    }
}

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
