//! Leader election between `kinformer run` processes against the emulation.
//! One Lease: one replica writes at a time; a leader cut off from the API
//! server stops writing before its Lease could expire; a killed leader is
//! replaced once its Lease expires, a stopped one at once; read-only plugins
//! run everywhere. A Lease per plugin: the replicas share the writers, a
//! killed replica's plugins move once their Leases expire, a stopped one's at
//! once, and a replica that joins gets its share.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The election's durations (lease, renew deadline, retry period): short, so
/// the test is quick; `KINFORMER_TEST_LEASE_MS=15000,10000,2000` measures
/// failover with client-go's defaults.
fn timings() -> [Duration; 3] {
    let quick = [2000, 1200, 250];
    let ms = std::env::var("KINFORMER_TEST_LEASE_MS").ok().map_or(quick, |text| {
        let parsed: Vec<u64> = text.split(',').map(|ms| ms.trim().parse().unwrap()).collect();
        parsed
            .try_into()
            .expect("KINFORMER_TEST_LEASE_MS=LEASE,RENEW_DEADLINE,RETRY")
    });
    ms.map(Duration::from_millis)
}

/// One `kinformer run --leader-elect` process.
struct Replica {
    name: &'static str,
    child: Child,
    status: std::net::SocketAddr,
    log: PathBuf,
}

impl Replica {
    fn start(name: &'static str, server: &ApiServer, dir: &Path, mode: &str) -> Self {
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, server.kubeconfig_with_token(name)).unwrap();
        let status = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let log = dir.join(format!("{name}.log"));
        let ms = |duration: Duration| format!("{}ms", duration.as_millis());
        let [lease, renew_deadline, retry] = timings();
        let child = Command::new(env!("CARGO_BIN_EXE_kinformer"))
            .arg("run")
            .arg("--plugins")
            .arg(dir.join("plugins"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .arg("--status-addr")
            .arg(status.to_string())
            .args(["--leader-elect", "--lease-name", "writers", "--leader-elect-mode", mode])
            .args(["--leader-elect-lease-duration", &ms(lease)])
            .args(["--leader-elect-renew-deadline", &ms(renew_deadline)])
            .args(["--leader-elect-retry-period", &ms(retry)])
            .args(["--log-format", "json"])
            .env("POD_NAME", name)
            .env("KINFORMER_LOG", "info")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self {
            name,
            child,
            status,
            log,
        }
    }

    /// What its status endpoint says now: (leading, writer's writes, logger's
    /// deltas, writer's state); `None` while it does not answer.
    async fn observe(&self) -> Option<Observed> {
        let leader = get(self.status, "/leader").await?;
        let plugins = get(self.status, "/plugins").await?;
        let plugin = |name: &str| {
            plugins
                .as_array()
                .and_then(|plugins| plugins.iter().find(|plugin| plugin["name"] == name).cloned())
        };
        let writer = plugin("writer")?;
        let logger = plugin("pods")?;
        Some(Observed {
            leading: leader["leading"].as_bool()?,
            writes: writer["writes"].as_u64()?,
            writer_state: writer["state"].as_str()?.to_owned(),
            logger_deltas: logger["deltas"].as_u64()?,
            logger_state: logger["state"].as_str()?.to_owned(),
        })
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone)]
struct Observed {
    leading: bool,
    writes: u64,
    writer_state: String,
    logger_deltas: u64,
    logger_state: String,
}

/// GET `path` of a status endpoint, as JSON.
async fn get(address: std::net::SocketAddr, path: &str) -> Option<serde_json::Value> {
    serde_json::from_str(&text(address, path).await?).ok()
}

/// GET `path` of a status endpoint: the body.
async fn text(address: std::net::SocketAddr, path: &str) -> Option<String> {
    let request = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        Some(response.split_once("\r\n\r\n")?.1.to_owned())
    };
    tokio::time::timeout(Duration::from_secs(1), request)
        .await
        .ok()
        .flatten()
}

/// Watches the replicas' write counters: fails the test when two replicas'
/// writes grew between the same two looks, or when a replica that does not
/// lead wrote.
#[derive(Default)]
struct Referee {
    last: std::collections::HashMap<&'static str, Observed>,
}

impl Referee {
    /// Looks at every live replica once; returns who wrote since the last look.
    async fn look(&mut self, replicas: &[&Replica]) -> Vec<&'static str> {
        let mut wrote = Vec::new();
        for replica in replicas {
            let Some(now) = replica.observe().await else { continue };
            if let Some(before) = self.last.get(replica.name)
                && now.writes > before.writes
            {
                wrote.push(replica.name);
            }
            self.last.insert(replica.name, now);
        }
        assert!(wrote.len() <= 1, "two replicas wrote at once: {wrote:?}");
        wrote
    }

    /// Looks until `done` says so, or fails with `what` after `limit`.
    async fn until(
        &mut self,
        replicas: &[&Replica],
        what: &str,
        limit: Duration,
        mut done: impl FnMut(&Self, &[&'static str]) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let wrote = self.look(replicas).await;
            if done(self, &wrote) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "{what} within {limit:?}; logs:\n{}",
                replicas
                    .iter()
                    .map(|replica| format!("--- {}\n{}", replica.name, replica.log()))
                    .collect::<String>()
            );
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }

    /// Waits until `follower` runs its read-only plugin and stands its writer
    /// by while `leader` leads.
    async fn follows(&mut self, leader: &Replica, follower: &Replica, limit: Duration) {
        let name = follower.name;
        let what = format!("replica {name} never started its read-only plugin");
        self.until(&[leader, follower], &what, limit, |referee, _| {
            referee
                .last
                .get(name)
                .is_some_and(|f| f.logger_deltas > 0 && f.writer_state == "Standby")
        })
        .await;
    }

    /// Waits until `name` writes; returns how long that took.
    async fn took_over(&mut self, replicas: &[&Replica], name: &'static str, limit: Duration) -> Duration {
        let what = format!("replica {name} never took over");
        self.until(replicas, &what, limit, |_, wrote| wrote == [name]).await
    }

    fn of(&self, name: &str) -> &Observed {
        &self.last[name]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_writes_at_a_time_and_another_takes_over_when_it_dies_hangs_or_stops() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plugins = d.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    // A writer (it patches a ConfigMap on every Pod delta) and a read-only
    // delta logger.
    std::fs::write(plugins.join("writer.wasm"), plugin_artifacts::WRITER).unwrap();
    std::fs::write(
        plugins.join("writer.toml"),
        "config = \"flood:ns-0\"\n\
         [[grant.write]]\nverbs = [\"create\", \"patch\"]\nresources = [\"v1/ConfigMap\"]\nnamespaces = [\"ns-0\"]\n",
    )
    .unwrap();
    std::fs::write(plugins.join("pods.wasm"), plugin_artifacts::DELTA_LOGGER).unwrap();
    std::fs::write(plugins.join("pods.toml"), "config = \"v1/Pod\"\n").unwrap();

    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let _churn = server
        .start_workload(&Workload::default().seed(3).size(1, 2, 3).changes_per_second(40.0))
        .unwrap();
    let startup = Duration::from_secs(60);
    let mut referee = Referee::default();

    // A leads and writes; B follows: its writer waits, its logger runs.
    let a = Replica::start("a", &server, d, "single");
    referee
        .until(
            &[&a],
            "replica a never wrote as the leader",
            startup,
            |referee, wrote| wrote == ["a"] && referee.of("a").leading,
        )
        .await;
    let metrics = text(a.status, "/metrics").await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(metrics.lines().map(|line| Ok(line.to_owned()))).unwrap();
    let leading = scrape
        .samples
        .iter()
        .find(|sample| sample.metric == "leader_election_master_status")
        .map(|sample| (sample.labels.get("name").map(str::to_owned), sample.value.clone()));
    assert_eq!(
        leading,
        Some((Some("default/writers".to_owned()), prometheus_parse::Value::Gauge(1.0)))
    );
    let b = Replica::start("b", &server, d, "single");
    referee
        .until(
            &[&a, &b],
            "replica b never started its read-only plugin",
            startup,
            |referee, _| referee.last.get("b").is_some_and(|b| b.logger_deltas > 0),
        )
        .await;
    let mut writes_seen = 0;
    referee
        .until(
            &[&a, &b],
            "replica a stopped writing while leading",
            startup,
            |_, wrote| {
                writes_seen += usize::from(wrote == ["a"]);
                writes_seen >= 5
            },
        )
        .await;
    assert!(!referee.of("b").leading);
    assert_eq!(referee.of("b").writer_state, "Standby");
    assert_eq!(referee.of("b").logger_state, "Running");

    // A is cut off from the API server: it stops writing at its renew
    // deadline, before its Lease could expire; then B takes over.
    server.faults().cut_off("a", true);
    let cut = Instant::now();
    let stepped_down = referee
        .until(
            &[&a, &b],
            "replica a, cut off, never stepped down",
            startup,
            |referee, _| !referee.of("a").leading,
        )
        .await;
    let a_writes = referee.of("a").writes;
    let taken = referee.took_over(&[&a, &b], "b", startup).await;
    let cut_failover = cut.elapsed();
    assert_eq!(
        referee.of("a").writes,
        a_writes,
        "the cut-off replica wrote after stepping down"
    );
    assert_eq!(referee.of("a").writer_state, "Standby");
    println!(
        "cut off: a stepped down after {} ms, b wrote {} ms after the cut",
        stepped_down.as_millis(),
        (stepped_down + taken).as_millis()
    );
    // Its log says so, as JSON lines, without the client libraries' own
    // lines about the hung connection.
    let lines: Vec<serde_json::Value> = a
        .log()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not a JSON log line: {line}")))
        .collect();
    assert!(
        lines.iter().any(|line| line["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("renew deadline"))),
        "the cut-off leader did not log why it stepped down:\n{}",
        a.log()
    );
    let noisy: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|line| {
            line["target"].as_str().is_some_and(|target| {
                ["kube_client", "hyper", "rustls", "tower"]
                    .iter()
                    .any(|t| target.starts_with(t))
            })
        })
        .collect();
    assert!(noisy.is_empty(), "client library lines in the log: {noisy:?}");
    drop(a);

    // B is killed: C takes over once B's Lease expires.
    let c = Replica::start("c", &server, d, "single");
    referee.follows(&b, &c, startup).await;
    let mut b = b;
    b.child.kill().unwrap();
    let kill_failover = referee.took_over(&[&c], "c", startup).await;
    drop(b);

    // C stops (SIGTERM): it releases the Lease, D takes over at once.
    let d_replica = Replica::start("d", &server, d, "single");
    referee.follows(&c, &d_replica, startup).await;
    c.terminate();
    let stop_failover = referee.took_over(&[&c, &d_replica], "d", startup).await;
    assert!(
        c.log().contains("released the Lease"),
        "the stopped leader did not release its Lease:\n{}",
        c.log()
    );
    println!(
        "failover (lease {} ms, renew deadline {} ms, retry {} ms): cut off {} ms, killed {} ms, stopped {} ms",
        timings()[0].as_millis(),
        timings()[1].as_millis(),
        timings()[2].as_millis(),
        cut_failover.as_millis(),
        kill_failover.as_millis(),
        stop_failover.as_millis()
    );
}

/// The writing plugins of the per-plugin test.
const WRITERS: [&str; 6] = ["w0", "w1", "w2", "w3", "w4", "w5"];

/// One replica as its status endpoint shows it: the plugins it leads, and
/// each writer's writes.
#[derive(Debug, Clone)]
struct Share {
    leads: Vec<String>,
    replicas: u64,
    writes: std::collections::BTreeMap<String, u64>,
}

impl Replica {
    async fn share(&self) -> Option<Share> {
        let leader = get(self.status, "/leader").await?;
        let plugins = get(self.status, "/plugins").await?;
        let leads = leader["leads"]
            .as_array()?
            .iter()
            .filter_map(|plugin| plugin.as_str().map(str::to_owned))
            .collect();
        let writes = plugins
            .as_array()?
            .iter()
            .filter_map(|plugin| Some((plugin["name"].as_str()?.to_owned(), plugin["writes"].as_u64()?)))
            .collect();
        Some(Share {
            leads,
            replicas: leader["replicas"].as_u64()?,
            writes,
        })
    }
}

/// Watches every replica's writes per plugin: fails the test when two
/// replicas wrote for one plugin between the same two looks.
#[derive(Default)]
struct PluginReferee {
    last: std::collections::HashMap<&'static str, Share>,
    /// Who wrote for each plugin at the last look that saw a write.
    writing: std::collections::BTreeMap<String, &'static str>,
}

impl PluginReferee {
    async fn look(&mut self, replicas: &[&Replica]) {
        let mut wrote: std::collections::BTreeMap<String, Vec<&'static str>> = std::collections::BTreeMap::new();
        for replica in replicas {
            let Some(now) = replica.share().await else { continue };
            if let Some(before) = self.last.get(replica.name) {
                for (plugin, writes) in &now.writes {
                    if *writes > before.writes.get(plugin).copied().unwrap_or(0) {
                        wrote.entry(plugin.clone()).or_default().push(replica.name);
                    }
                }
            }
            self.last.insert(replica.name, now);
        }
        for (plugin, writers) in wrote {
            assert!(writers.len() <= 1, "replicas {writers:?} wrote for {plugin} at once");
            self.writing.insert(plugin, writers[0]);
        }
    }

    /// Looks until `done`, or fails with `what` after `limit`; returns how
    /// long it took.
    async fn until(
        &mut self,
        replicas: &[&Replica],
        what: &str,
        limit: Duration,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            self.look(replicas).await;
            if done(self) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "{what} within {limit:?}; seen: {:?}; logs:\n{}",
                self.last,
                replicas
                    .iter()
                    .map(|replica| format!("--- {}\n{}", replica.name, replica.log()))
                    .collect::<String>()
            );
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }

    /// True when each of `replicas` leads `each` plugins, together all of
    /// them, and each plugin was last written by the replica leading it.
    fn balanced(&self, replicas: &[&Replica], each: usize) -> bool {
        let mut led: Vec<&String> = Vec::new();
        for replica in replicas {
            let Some(share) = self.last.get(replica.name) else {
                return false;
            };
            if share.leads.len() != each || share.replicas != replicas.len() as u64 {
                return false;
            }
            if !share
                .leads
                .iter()
                .all(|plugin| self.writing.get(plugin) == Some(&replica.name))
            {
                return false;
            }
            led.extend(&share.leads);
        }
        led.sort();
        led == WRITERS.iter().collect::<Vec<_>>()
    }

    fn leads(&self, replica: &Replica) -> Vec<String> {
        self.last
            .get(replica.name)
            .map(|share| share.leads.clone())
            .unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_writing_plugins_and_take_over_those_of_a_replica_that_dies_or_stops() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plugins = d.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    // Six writers: each patches a ConfigMap on every Pod delta.
    for name in WRITERS {
        std::fs::write(plugins.join(format!("{name}.wasm")), plugin_artifacts::WRITER).unwrap();
        std::fs::write(
            plugins.join(format!("{name}.toml")),
            "config = \"flood:ns-0\"\n\
             [[grant.write]]\nverbs = [\"create\", \"patch\"]\nresources = [\"v1/ConfigMap\"]\nnamespaces = [\"ns-0\"]\n",
        )
        .unwrap();
    }
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let _churn = server
        .start_workload(&Workload::default().seed(5).size(1, 2, 3).changes_per_second(10.0))
        .unwrap();
    let startup = Duration::from_secs(90);
    let [lease, _, retry] = timings();
    let mut referee = PluginReferee::default();

    // Three replicas: two plugins each, every plugin written by its leader.
    let a = Replica::start("a", &server, d, "per-plugin");
    let b = Replica::start("b", &server, d, "per-plugin");
    let c = Replica::start("c", &server, d, "per-plugin");
    referee
        .until(
            &[&a, &b, &c],
            "three replicas never led two plugins each",
            startup,
            |referee| referee.balanced(&[&a, &b, &c], 2),
        )
        .await;
    // Every plugin's Lease is in the metrics, led here or not.
    let metrics = text(a.status, "/metrics").await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(metrics.lines().map(|line| Ok(line.to_owned()))).unwrap();
    let mut leases: Vec<(String, f64)> = scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == "leader_election_master_status")
        .filter_map(|sample| match sample.value {
            prometheus_parse::Value::Gauge(value) => Some((sample.labels.get("name")?.to_owned(), value)),
            _ => None,
        })
        .collect();
    leases.sort_by(|x, y| x.0.cmp(&y.0));
    let led_by_a: Vec<String> = referee
        .leads(&a)
        .iter()
        .map(|plugin| format!("default/writers-{plugin}"))
        .collect();
    assert_eq!(
        leases.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>(),
        WRITERS.map(|plugin| format!("default/writers-{plugin}"))
    );
    assert!(
        leases
            .iter()
            .all(|(name, value)| (*value == 1.0) == led_by_a.contains(name)),
        "{leases:?}"
    );

    // A is killed: its two plugins go to B and C once their Leases expire.
    let mut a = a;
    a.child.kill().unwrap();
    let killed = referee
        .until(
            &[&b, &c],
            "the killed replica's plugins never moved",
            startup,
            |referee| referee.balanced(&[&b, &c], 3),
        )
        .await;
    drop(a);
    // Each took over once the Lease expired (as seen from its last renewal)
    // and at its next try; the margin is for loading the plugin and the
    // looks of this test on a loaded machine.
    let bound = lease + retry * 4 + Duration::from_secs(3);
    assert!(killed <= bound, "the plugins moved after {killed:?}, over {bound:?}");

    // D joins: B and C each give one back, D takes its share.
    let d_replica = Replica::start("d", &server, d, "per-plugin");
    let joined = referee
        .until(
            &[&b, &c, &d_replica],
            "the replica that joined never got its share",
            startup,
            |referee| referee.balanced(&[&b, &c, &d_replica], 2),
        )
        .await;

    // B stops (SIGTERM): it releases its Leases, C and D take them at once.
    b.terminate();
    let stopped = referee
        .until(
            &[&b, &c, &d_replica],
            "the stopped replica's plugins never moved",
            startup,
            |referee| referee.balanced(&[&c, &d_replica], 3),
        )
        .await;
    let log = b.log();
    assert_eq!(
        log.matches("released the plugin's Lease").count(),
        2,
        "the stopped replica did not release both its Leases:\n{log}"
    );
    let bound = retry * 4 + Duration::from_secs(3);
    assert!(stopped <= bound, "the plugins moved after {stopped:?}, over {bound:?}");
    println!(
        "per-plugin failover (lease {} ms, retry {} ms, 6 writers): killed {} ms, joined and balanced {} ms, stopped {} ms",
        lease.as_millis(),
        retry.as_millis(),
        killed.as_millis(),
        joined.as_millis(),
        stopped.as_millis()
    );
}
