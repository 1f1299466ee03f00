//! A plugin for the benchmarks. Its config picks what it does with each delta:
//!
//! - `noop`: nothing.
//! - `sum`: parses the pod and adds its containers' CPU requests to a
//!   per-namespace total (the same code as the native side of the benchmark).
//! - `queries|KEY|SELECTOR|INDEX|VALUE|N`: on its first call, runs N cache
//!   gets of KEY, N lists by SELECTOR and N lookups of VALUE in INDEX, and logs
//!   `queries get_ns=… list_ns=… index_ns=… listed=…`, the mean time per call.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kinformer_sdk::{Delta, Error, Gvk, Handler, Registration, Result, cache, info};

mod requests;

enum Mode {
    Noop,
    Sum(BTreeMap<String, u64>),
    Queries { spec: Vec<String>, done: bool },
}

struct Probe(Mode);

impl Handler for Probe {
    fn init(config: &str) -> Result<(Self, Registration)> {
        let mode = match config.split('|').next().unwrap_or_default() {
            "noop" | "" => Mode::Noop,
            "sum" => Mode::Sum(BTreeMap::new()),
            "queries" => {
                let spec: Vec<String> = config.split('|').skip(1).map(str::to_owned).collect();
                if spec.len() != 5 {
                    return Err(Error::msg("want queries|KEY|SELECTOR|INDEX|VALUE|N"));
                }
                Mode::Queries { spec, done: false }
            }
            other => return Err(Error::msg(format!("unknown mode {other:?}"))),
        };
        let pods = Gvk::of::<Pod>();
        let registration = Registration::new("bench-probe", env!("CARGO_PKG_VERSION"))
            .watch(pods.clone())
            .index(pods, "node", "spec.nodeName");
        Ok((Self(mode), registration))
    }

    fn handle(&mut self, delta: Delta) -> Result<()> {
        match &mut self.0 {
            Mode::Noop => {}
            Mode::Sum(totals) => {
                let pod: Pod = delta.object().map_err(Error::msg)?;
                requests::add_requests(totals, &pod);
            }
            Mode::Queries { spec, done } => {
                if !*done {
                    *done = true;
                    run_queries(spec)?;
                }
            }
        }
        Ok(())
    }
}

fn run_queries(spec: &[String]) -> Result<()> {
    let pods = Gvk::of::<Pod>();
    let (key, selector, index, value) = (&spec[0], &spec[1], &spec[2], &spec[3]);
    let n: u32 = spec[4].parse().map_err(Error::msg)?;
    let mean = |started: Instant| started.elapsed().as_nanos() / u128::from(n.max(1));

    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(cache::get(&pods, key).map_err(Error::msg)?);
    }
    let get_ns = mean(started);
    let started = Instant::now();
    let mut listed = 0;
    for _ in 0..n {
        listed = cache::list(&pods)
            .label_selector(selector.as_str())
            .fetch()
            .map_err(Error::msg)?
            .objects
            .len();
    }
    let list_ns = mean(started);
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(cache::by_index(&pods, index, value, 0).map_err(Error::msg)?);
    }
    let index_ns = mean(started);
    info!("queries get_ns={get_ns} list_ns={list_ns} index_ns={index_ns} listed={listed}");
    Ok(())
}

kinformer_sdk::plugin!(Probe);
