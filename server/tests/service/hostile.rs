//! Hostile and careless input against the service process, each a reproduction that once
//! took it down or held it without bound: config files that nest without end, are too
//! large or too many, or are applied while half-written; connections that never finish a
//! request (slowloris over HTTP, TLS and gRPC), floods of HTTP/2 streams and of sockets, a
//! process out of file descriptors, a stop with connections that never close; bad token,
//! TLS and body input; and the security switches (gRPC authentication, `/metrics` behind
//! the token, bounded `detailed_metric` labels, refused `limit` overrides, requests from
//! web pages). Memory and file descriptors are read from `/proc`; the process must never
//! exit on any of it.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_ratelimit_testkit::server::{Server, wait_until};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use crate::harness::{
    Reply, Service, TempDir, descriptor, exchange, on_runtime, redis_url, request,
};
use tokio_rustls::rustls;

const CONFIG: &str = r#"
domain: hostile
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000000, name: per-user}
  - key: leased
    rate_limit: {unit: day, requests_per_unit: 100, name: leased, algorithm: token_bucket}
  - key: path
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 1000000, name: per-path}
"#;

fn start(redis: &Server, extra: &[&str]) -> Service {
    Service::start(&redis_url(redis), &[("hostile.yaml", CONFIG)], extra)
}

fn body(key: &str, value: &str) -> String {
    format!(
        r#"{{"domain":"hostile","descriptors":[{{"entries":[{{"key":"{key}","value":"{value}"}}]}}]}}"#
    )
}

/// A problem+json answer (RFC 9457) of `status`.
fn assert_problem(reply: &Reply, status: u16) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    let problem: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(problem["status"], status);
}

/// The service answers a check over HTTP, and has not exited.
fn answers_http(service: &mut Service) -> bool {
    service.exited().is_none() && service.check_json(&body("user", "probe")).0 == 200
}

/// One gRPC check on its own runtime: the overall code.
fn grpc_code(address: SocketAddr, entry: (&str, &str)) -> Result<i32, tonic::Status> {
    grpc_check(address, vec![descriptor(&[entry])]).map(|response| response.overall_code)
}

/// One gRPC check of `descriptors` in the test's domain, on its own runtime.
fn grpc_check(
    address: SocketAddr,
    descriptors: Vec<RateLimitDescriptor>,
) -> Result<RateLimitResponse, tonic::Status> {
    on_runtime(async move {
        let mut client = RateLimitServiceClient::connect(format!("http://{address}"))
            .await
            .map_err(|error| tonic::Status::unavailable(error.to_string()))?;
        client
            .should_rate_limit(request("hostile", descriptors))
            .await
            .map(tonic::Response::into_inner)
    })
}

// ---- /proc ----

/// Resident memory in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap()
}

/// Open file descriptors.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// `each` idle connections to each of `addresses` (those the kernel takes within 500 ms).
fn connect_many(addresses: &[SocketAddr], each: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::new();
    for address in addresses {
        for _ in 0..each {
            if let Ok(stream) = TcpStream::connect_timeout(address, Duration::from_millis(500)) {
                sockets.push(stream);
            }
        }
    }
    sockets
}

/// CPU time (user + system) in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = stat.rsplit_once(')').unwrap().1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

// ---- raw HTTP/2 ----

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = payload.len() as u32;
    let mut frame = vec![
        (length >> 16) as u8,
        (length >> 8) as u8,
        length as u8,
        kind,
        flags,
    ];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A literal header field without indexing, with a new name (HPACK, RFC 7541 §6.2.2);
/// names and values under 127 bytes, no Huffman coding.
fn hpack_literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0x00);
    block.push(name.len() as u8);
    block.extend_from_slice(name.as_bytes());
    block.push(value.len() as u8);
    block.extend_from_slice(value.as_bytes());
}

/// A HEADERS frame opening stream `stream` with a POST to `path`, its body never sent.
fn h2_post(stream: u32, path: &str, content_type: &str) -> Vec<u8> {
    // :method POST and :scheme http are static table entries 3 and 6; :path and
    // :authority are literals with indexed names (4 and 1).
    let mut block = vec![0x83, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    hpack_literal(&mut block, "content-type", content_type);
    hpack_literal(&mut block, "te", "trailers");
    h2_frame(0x1, 0x4, stream, &block)
}

const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// What a raw HTTP/2 peer received: stream resets, GOAWAYs, the streams the server ended
/// (a reset, or a response's last HEADERS), the acks of its own pings, and whether it closed
/// the connection.
#[derive(Default)]
struct H2Received {
    resets: AtomicU64,
    goaways: AtomicU64,
    ended: std::sync::Mutex<std::collections::HashSet<u32>>,
    pings_acked: AtomicU64,
    closed: AtomicBool,
}

/// A raw HTTP/2 connection that opens streams and never sends their messages; a thread
/// reads and counts what the server sends back (never answering its pings).
struct H2Flood {
    stream: TcpStream,
    received: Arc<H2Received>,
    next_stream: u32,
    pings_sent: u64,
}

impl Drop for H2Flood {
    fn drop(&mut self) {
        // The reader thread holds a clone of the socket: shut it down for both.
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl H2Flood {
    fn open(address: SocketAddr) -> H2Flood {
        let mut stream = TcpStream::connect(address).unwrap();
        stream.write_all(H2_PREFACE).unwrap();
        stream.write_all(&h2_frame(0x4, 0, 0, &[])).unwrap();
        let received = Arc::new(H2Received::default());
        let mut reader = stream.try_clone().unwrap();
        let counts = Arc::clone(&received);
        std::thread::spawn(move || {
            let mut header = [0u8; 9];
            loop {
                if reader.read_exact(&mut header).is_err() {
                    counts.closed.store(true, Ordering::Relaxed);
                    return;
                }
                let length = (usize::from(header[0]) << 16)
                    | (usize::from(header[1]) << 8)
                    | usize::from(header[2]);
                let mut payload = vec![0u8; length];
                if reader.read_exact(&mut payload).is_err() {
                    counts.closed.store(true, Ordering::Relaxed);
                    return;
                }
                let stream =
                    u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
                match (header[3], header[4] & 0x1 != 0) {
                    (0x3, _) => {
                        counts.resets.fetch_add(1, Ordering::Relaxed);
                        counts.ended.lock().unwrap().insert(stream);
                    }
                    (0x1, true) => {
                        counts.ended.lock().unwrap().insert(stream);
                    }
                    (0x6, true) => {
                        counts.pings_acked.fetch_add(1, Ordering::Relaxed);
                    }
                    (0x7, _) => {
                        counts.goaways.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        });
        H2Flood {
            stream,
            received,
            next_stream: 1,
            pings_sent: 0,
        }
    }

    /// Sends a PING: the server reads frames in order, so its ack says it has read every
    /// frame sent before (the streams opened), and acted on them.
    fn ping(&mut self) {
        self.pings_sent += 1;
        let _ = self
            .stream
            .write_all(&h2_frame(0x6, 0, 0, &self.pings_sent.to_be_bytes()));
    }

    /// Whether the server has read all that was sent before the last [`H2Flood::ping`]: it
    /// acked the ping, or it ended the connection.
    fn read_up_to_the_ping(&self) -> bool {
        self.received.pings_acked.load(Ordering::Relaxed) >= self.pings_sent
            || self.received.goaways.load(Ordering::Relaxed) > 0
            || self.received.closed.load(Ordering::Relaxed)
    }

    /// Opens `count` streams (fewer if the server closes the connection first).
    fn open_streams(&mut self, count: usize, path: &str, content_type: &str) -> usize {
        let mut batch = Vec::new();
        let mut sent = 0;
        for _ in 0..count {
            batch.extend_from_slice(&h2_post(self.next_stream, path, content_type));
            self.next_stream += 2;
            sent += 1;
            if batch.len() > 64 * 1024 {
                if self.stream.write_all(&batch).is_err() {
                    return sent;
                }
                batch.clear();
            }
        }
        let _ = self.stream.write_all(&batch);
        sent
    }
}

// ---- H1: config files that nest without end, are too large or too many ----

fn deep_descriptors(levels: usize) -> String {
    format!("domain: deep\ndescriptors:\n{}x\n", "- ".repeat(levels))
}

/// Valid and deep: `levels` nested descriptors in block style (1,000 levels: 2 MB).
fn nested_descriptors(levels: usize) -> String {
    let mut text = String::from("domain: nested\ndescriptors:\n");
    for level in 0..levels {
        let indent = " ".repeat(4 * level);
        text.push_str(&format!(
            "{indent}  - key: k\n{indent}    rate_limit: {{unit: second, requests_per_unit: 1}}\n{indent}    descriptors:\n"
        ));
    }
    text
}

/// Anchors each aliasing the last, so every alias adds the depth of the one before.
fn stacked_anchors(count: usize) -> String {
    let mut text = String::from("domain: anchors\nx0: &a0 [[[1]]]\n");
    for index in 1..count {
        text.push_str(&format!("x{index}: &a{index} [[*a{}]]\n", index - 1));
    }
    text
}

#[test]
fn config_bombs_on_reload_are_refused_with_the_old_config_kept() {
    let redis = Server::start(&[]);
    let mut service = start(&redis, &[]);
    let bombs: Vec<(&str, String, &str)> = vec![
        // 7,000 block sequences in 14 kB: the reload's parser overflowed its stack.
        (
            "deep.yaml",
            deep_descriptors(7_000),
            "deep.yaml:3: nested deeper than 64 levels",
        ),
        // 1,000 levels of valid nested descriptors, 2 MB: aborted the reload.
        (
            "nested.yaml",
            nested_descriptors(1_000),
            "nested.yaml: the file is larger than 1048576 bytes",
        ),
        // 100 levels, 40 kB: refused by its depth.
        (
            "nested.yaml",
            nested_descriptors(100),
            "nested.yaml:96: nested deeper than 64 levels",
        ),
        // Anchors stacking depth through aliases.
        ("anchors.yaml", stacked_anchors(2_000), "anchors.yaml:"),
        // Past the size bound (1 MiB): a comment of 2 MiB.
        (
            "large.yaml",
            format!("domain: large\n#{}\n", "x".repeat(2 * 1024 * 1024)),
            "large.yaml: the file is larger than 1048576 bytes",
        ),
    ];
    for (round, (name, text, expected)) in bombs.iter().enumerate() {
        service.config.write(name, text);
        assert!(
            service.wait_log("config change refused", round + 1),
            "{name}: {}",
            service.log()
        );
        let log = service.log();
        assert!(log.contains(expected), "{name}: {expected}\n{log}");
        assert!(!log.contains("overflow"), "{log}");
        assert!(
            answers_http(&mut service),
            "{name}: the old config is served"
        );
        std::fs::remove_file(service.config.0.join(name)).unwrap();
    }
    let metrics = service.http("GET", "/metrics", "", &[]).body;
    assert!(
        metrics.contains("ratelimit_config_reloads_total{result=\"refused\"} 5"),
        "{metrics}"
    );
    // The watcher's count bound: 101 files are refused without reading them.
    for index in 0..=100 {
        service
            .config
            .write(&format!("many-{index:03}.yaml"), "domain: x\n");
    }
    assert!(
        service.wait_log("more than 100 config files", 1),
        "{}",
        service.log()
    );
    assert!(answers_http(&mut service));
}

#[test]
fn a_config_bomb_at_start_exits_with_the_file_line_and_reason() {
    let redis = Server::start(&[]);
    let url = redis_url(&redis);
    // 40,000 levels (80 kB) aborted the process at start, a crash loop.
    let (status, log) =
        Service::exit_at_start(&url, &[("deep.yaml", &deep_descriptors(40_000))], &[]);
    assert_eq!(
        status.code(),
        Some(1),
        "a clear exit code, not a signal: {log}"
    );
    assert!(
        log.contains("deep.yaml:3: nested deeper than 64 levels"),
        "{log}"
    );
    assert!(log.contains("the config is refused"), "{log}");
    assert!(!log.contains("overflow"), "{log}");
    // The bound is a flag.
    let (status, log) = Service::exit_at_start(
        &url,
        &[("hostile.yaml", CONFIG)],
        &["--config-max-depth", "3"],
    );
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("nested deeper than 3 levels"), "{log}");
}

// ---- M3: a config rewritten in place is applied only whole ----

#[test]
fn a_config_rewritten_in_place_is_applied_only_whole() {
    let redis = Server::start(&[]);
    let mut text = String::from("domain: whole\ndescriptors:\n");
    for rule in 0..40 {
        text.push_str(&format!(
            "  - key: k{rule}\n    rate_limit: {{unit: day, requests_per_unit: 1000000, name: r{rule}}}\n"
        ));
    }
    let service = Arc::new(Service::start(
        &redis_url(&redis),
        &[("whole.yaml", &text)],
        &["--watch-ms", "200"],
    ));
    let check = r#"{"domain":"whole","descriptors":[{"entries":[{"key":"k39","value":"v"}]}]}"#;
    let (_, answer) = service.check_json(check);
    assert_eq!(answer["statuses"][0]["currentLimit"]["name"], "r39");
    let writing = Arc::new(AtomicBool::new(true));
    let (unlimited, checked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let checker = {
        let (service, writing) = (Arc::clone(&service), Arc::clone(&writing));
        let (unlimited, checked) = (Arc::clone(&unlimited), Arc::clone(&checked));
        std::thread::spawn(move || {
            while writing.load(Ordering::Relaxed) {
                let (_, answer) = service.check_json(check);
                checked.fetch_add(1, Ordering::Relaxed);
                if answer["statuses"][0]["currentLimit"].is_null() {
                    unlimited.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // The same file rewritten in place, a line every 20 ms: its prefixes are valid configs.
    let path = service.config.0.join("whole.yaml");
    let mut file = std::fs::File::create(&path).unwrap();
    for line in text.split_inclusive('\n') {
        file.write_all(line.as_bytes()).unwrap();
        file.flush().unwrap();
        // The pace is what is tested: the watcher polls (200 ms) while the file grows.
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(file);
    // Whatever was pending is settled once the watcher has taken in a change made after the
    // last write: a second file, whose reload (of two files) must be the only one.
    service.config.write(
        "marker.yaml",
        "domain: marker\ndescriptors:\n  - key: m\n    rate_limit: {unit: day, requests_per_unit: 1}\n",
    );
    assert!(
        service.wait_log("config reloaded domains=2 files=2", 1),
        "the second file was never loaded:\n{}",
        service.log()
    );
    writing.store(false, Ordering::Relaxed);
    checker.join().unwrap();
    let (unlimited, checked) = (
        unlimited.load(Ordering::Relaxed),
        checked.load(Ordering::Relaxed),
    );
    eprintln!("in-place rewrite: {unlimited} of {checked} checks of k39 answered without a limit");
    assert!(checked > 20, "{checked}");
    assert_eq!(
        unlimited,
        0,
        "a half-written config was served:\n{}",
        service.log()
    );
    assert_eq!(
        service.log().matches("config reloaded").count(),
        1,
        "only the second file's reload:\n{}",
        service.log()
    );
}

// ---- H3: streams flooding one gRPC connection ----

#[test]
fn a_stream_flood_keeps_memory_bounded() {
    let redis = Server::start(&[]);
    let mut service = start(&redis, &[]);
    let pid = service.pid();
    for index in 0..50 {
        assert_eq!(
            grpc_code(service.grpc, ("user", &format!("warm{index}"))).unwrap(),
            Code::Ok as i32
        );
    }
    let before = rss_kib(pid);
    let fds_before = open_fds(pid);
    // 20,000 streams whose message never arrives, on one connection (the reproduction took
    // the service from 8 to 177 MB), on each listener (the HTTP one speaks h2c).
    let mut grpc = H2Flood::open(service.grpc);
    let sent = grpc.open_streams(20_000, RLS_PATH, "application/grpc");
    let mut h2c = H2Flood::open(service.http);
    h2c.open_streams(20_000, "/v1/check", "application/json");
    grpc.ping();
    h2c.ping();
    assert!(
        wait_until(Duration::from_secs(20), || grpc.read_up_to_the_ping()
            && h2c.read_up_to_the_ping()),
        "the service never read the streams"
    );
    assert_eq!(
        grpc_code(service.grpc, ("user", "during")).unwrap(),
        Code::Ok as i32,
        "others are served during the flood"
    );
    let during = rss_kib(pid);
    let refused = grpc.received.resets.load(Ordering::Relaxed);
    let closed = grpc.received.closed.load(Ordering::Relaxed)
        || grpc.received.goaways.load(Ordering::Relaxed) > 0;
    eprintln!(
        "stream flood: RSS {:.1} MiB before, {:.1} MiB with 2 x 20,000 streams sent on one \
         connection each ({sent} sent on gRPC, {refused} reset, connection closed: {closed})",
        mib(before),
        mib(during),
    );
    assert!(
        during < before + 32 * 1024,
        "memory grew {:.1} MiB for one connection's streams",
        mib(during - before)
    );
    assert!(refused > 0 || closed, "streams past the bound are refused");
    // Many connections, each with its streams full: the most the bounds allow here.
    let mut full = Vec::new();
    for _ in 0..100 {
        let mut flood = H2Flood::open(service.grpc);
        flood.open_streams(128, RLS_PATH, "application/grpc");
        flood.ping();
        full.push(flood);
    }
    assert!(
        wait_until(Duration::from_secs(20), || full
            .iter()
            .all(H2Flood::read_up_to_the_ping)),
        "the service never read the streams"
    );
    let full_streams = rss_kib(pid);
    eprintln!(
        "stream flood: {:.1} MiB with 100 connections x 128 streams",
        mib(full_streams)
    );
    assert!(
        full_streams < before + 256 * 1024,
        "memory grew {:.1} MiB for 100 full connections",
        mib(full_streams.saturating_sub(before))
    );
    // The request timeout (10 s) ends the streams, which never sent their message.
    assert!(
        wait_until(Duration::from_secs(20), || full.iter().all(|flood| flood
            .received
            .ended
            .lock()
            .unwrap()
            .len()
            >= 128)),
        "every stream without a message is ended by the request timeout"
    );
    drop((grpc, h2c, full));
    assert!(
        wait_until(Duration::from_secs(10), || open_fds(pid) <= fds_before + 4),
        "the flood's connections were never closed: {} descriptors open, {fds_before} before",
        open_fds(pid)
    );
    eprintln!(
        "stream flood: {:.1} MiB once every stream ended and the connections closed",
        mib(rss_kib(pid))
    );
    assert!(answers_http(&mut service));
}

#[test]
fn past_the_per_connection_concurrency_streams_are_refused_at_once() {
    let redis = Server::start(&[]);
    let mut service = start(
        &redis,
        &["--grpc-concurrency", "4", "--request-timeout-ms", "3000"],
    );
    let mut flood = H2Flood::open(service.grpc);
    flood.open_streams(10, RLS_PATH, "application/grpc");
    // Six are answered at once (RESOURCE_EXHAUSTED), four wait for their message.
    assert!(wait_until(Duration::from_secs(2), || flood
        .received
        .ended
        .lock()
        .unwrap()
        .len()
        >= 6));
    assert_eq!(flood.received.ended.lock().unwrap().len(), 6);
    assert!(wait_until(Duration::from_secs(6), || flood
        .received
        .ended
        .lock()
        .unwrap()
        .len()
        == 10));
    assert!(answers_http(&mut service));
}

// ---- M1: slowloris and idle connections, a connection cap, EMFILE ----

/// Sends `bytes` one at a time, `every` apart, then waits; returns how long until the
/// server closed the connection (`None`: still open after `limit`).
fn time_to_close(
    mut stream: TcpStream,
    bytes: &[u8],
    every: Duration,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut sent = 0;
    let mut scratch = [0u8; 4096];
    let mut next_send = Instant::now();
    while started.elapsed() < limit {
        if sent < bytes.len() && Instant::now() >= next_send {
            if stream.write_all(&bytes[sent..sent + 1]).is_err() {
                return Some(started.elapsed());
            }
            sent += 1;
            next_send = Instant::now() + every;
        }
        match stream.read(&mut scratch) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

/// A TLS client stream to `address` trusting `ca` (blocking rustls), the handshake done.
fn tls_client(
    address: SocketAddr,
    ca: &Path,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    tls_client_as(address, ca, None).unwrap()
}

/// The same, presenting a client certificate and key if given; the handshake's error if
/// the server refuses it.
pub fn tls_client_as(
    address: SocketAddr,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            builder
                .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap())
                .unwrap()
        }
    };
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, TcpStream::connect(address)?);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// A GET of /healthz over `stream`: the reply's first line, or the error (TLS 1.3 tells a
/// refused client certificate only after the handshake, at the first read).
fn tls_healthz(
    stream: std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>,
) -> std::io::Result<String> {
    let mut stream = stream?;
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply.lines().next().unwrap_or_default().to_string())
}

/// A CA, a server certificate for localhost and 127.0.0.1 and a client certificate, both
/// signed by it (openssl).
pub struct Certificates {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("openssl is needed to make test certificates: {error}"));
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

pub fn certificates(dir: &Path) -> Certificates {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(dir, &ca);
    for (name, subject, extension) in [
        (
            "server",
            "/CN=localhost",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ),
        ("client", "/CN=envoy", "extendedKeyUsage=clientAuth"),
    ] {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        let mut request = vec!["req"];
        request.extend(ec);
        request.extend(["-subj", subject, "-keyout", &key, "-out", &csr]);
        openssl(dir, &request);
        let ext = dir.join(format!("{name}.ext"));
        std::fs::write(&ext, format!("{extension}\n")).unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                ext.to_str().unwrap(),
                "-out",
                &pem,
            ],
        );
    }
    Certificates {
        ca: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    }
}

/// A request head that takes 20 s at a byte per 200 ms.
const SLOW_HEAD: &[u8] = b"POST /v1/check HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";

const SLOW_BYTE: Duration = Duration::from_millis(200);

/// How long the slow cases watch a connection.
const SLOW_LIMIT: Duration = Duration::from_secs(20);

/// The TLS handshake done, then `SLOW_HEAD` a byte at a time: when the server closed.
fn tls_time_to_close(address: SocketAddr, ca: &Path) -> Option<Duration> {
    let mut tls = tls_client(address, ca);
    tls.sock
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let started = Instant::now();
    let mut scratch = [0u8; 1024];
    for byte in SLOW_HEAD {
        if tls
            .write_all(std::slice::from_ref(byte))
            .and_then(|()| tls.flush())
            .is_err()
        {
            return Some(started.elapsed());
        }
        // The slowness is what is tested: a byte per SLOW_BYTE of real time.
        std::thread::sleep(SLOW_BYTE);
        match tls.read(&mut scratch) {
            Ok(0) => return Some(started.elapsed()),
            Err(error) if !matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Some(started.elapsed());
            }
            _ => {}
        }
    }
    None
}

/// With the default timeouts (10 s for a head, 10 s for a request), every slow or idle
/// connection is closed, over HTTP, TLS and gRPC; all cases at once.
#[test]
fn slow_and_idle_connections_are_closed() {
    let redis = Server::start(&[]);
    let dir = TempDir::new("slowloris");
    let certs = certificates(&dir.0);
    let mut plain = start(&redis, &[]);
    let (cert, key) = (
        certs.server_cert.to_str().unwrap(),
        certs.server_key.to_str().unwrap(),
    );
    let mut tls = start(&redis, &["--http-tls-cert", cert, "--http-tls-key", key]);
    let (http, grpc, https) = (plain.http, plain.grpc, tls.http);
    let slow = |address: SocketAddr, bytes: &'static [u8]| {
        std::thread::spawn(move || {
            time_to_close(
                TcpStream::connect(address).unwrap(),
                bytes,
                SLOW_BYTE,
                SLOW_LIMIT,
            )
        })
    };
    let ca = certs.ca.clone();
    let cases = vec![
        ("an HTTP head a byte at a time", slow(http, SLOW_HEAD)),
        ("an idle HTTP socket", slow(http, b"")),
        ("an idle gRPC socket", slow(grpc, b"")),
        (
            "an HTTP/2 preface, no SETTINGS after it",
            slow(grpc, H2_PREFACE),
        ),
        ("an idle socket to the TLS listener", slow(https, b"")),
        (
            "a TLS head a byte at a time",
            std::thread::spawn(move || tls_time_to_close(https, &ca)),
        ),
        (
            "a keep-alive connection idle after its request",
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(http).unwrap();
                let check = body("user", "keepalive");
                let request = format!(
                    "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{check}",
                    check.len()
                );
                stream.write_all(request.as_bytes()).unwrap();
                time_to_close(stream, b"", SLOW_BYTE, SLOW_LIMIT)
            }),
        ),
    ];
    // A body that never comes: 408 at the request timeout.
    let body_case = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(http).unwrap();
        stream
            .write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            .unwrap();
        stream.set_read_timeout(Some(SLOW_LIMIT)).unwrap();
        let started = Instant::now();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        (answer, started.elapsed())
    });
    for (case, closed) in cases {
        let closed = closed.join().unwrap();
        eprintln!("{case}: closed after {closed:?}");
        assert!(
            closed.is_some_and(|after| after < Duration::from_secs(14)),
            "{case}: {closed:?}"
        );
    }
    let (answer, after) = body_case.join().unwrap();
    eprintln!("a body that never comes: answered after {after:?}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answers_http(&mut plain));
    assert!(tls.exited().is_none());
}

#[test]
fn a_connection_flood_is_capped() {
    let redis = Server::start(&[]);
    let mut service = start(
        &redis,
        &["--max-connections", "32", "--header-timeout-ms", "500"],
    );
    let pid = service.pid();
    let before = open_fds(pid);
    let sockets = connect_many(&[service.http, service.grpc], 300);
    // Measured once the service took in a listener's bound (32) of them: the most it holds
    // (the idle ones are closed at the header timeout, and others taken in their place).
    assert!(
        wait_until(Duration::from_secs(10), || open_fds(pid) >= before + 32),
        "the listeners never reached their bound: {} descriptors open (before: {before})",
        open_fds(pid)
    );
    let during = open_fds(pid);
    eprintln!(
        "connection flood: {} sockets opened, the service's descriptors {before} before, {during} during",
        sockets.len()
    );
    assert!(
        during <= before + 2 * 32 + 8,
        "{during} descriptors open (before: {before})"
    );
    // Idle sockets are closed at the header timeout; the queue drains and others are served.
    assert!(
        wait_until(Duration::from_secs(30), || answers_http(&mut service)),
        "served once the idle sockets are closed"
    );
    drop(sockets);
    assert!(wait_until(Duration::from_secs(10), || open_fds(pid) <= before + 4));
}

#[test]
fn accepting_backs_off_when_out_of_file_descriptors() {
    let redis = Server::start(&[]);
    let mut service =
        Service::start_limited(&redis_url(&redis), &[("hostile.yaml", CONFIG)], &[], 96);
    let pid = service.pid();
    let sockets = connect_many(&[service.grpc, service.http], 150);
    assert!(
        wait_until(Duration::from_secs(10), || open_fds(pid) >= 94),
        "the descriptors ran out: {} open",
        open_fds(pid)
    );
    assert!(
        wait_until(Duration::from_secs(10), || service
            .log()
            .contains("cannot accept")),
        "{}",
        service.log()
    );
    let ticks = cpu_ticks(pid);
    // The measure is the CPU time spent over a stretch of real time: it must pass.
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_ticks(pid) - ticks;
    eprintln!(
        "out of descriptors: {spent} CPU ticks (1/100 s) in 2 s with {} sockets waiting, {} descriptors open",
        sockets.len(),
        open_fds(pid)
    );
    assert!(spent < 20, "the accept loop spins: {spent} ticks in 2 s");
    assert!(service.log().contains("cannot accept"), "{}", service.log());
    drop(sockets);
    assert!(
        wait_until(Duration::from_secs(10), || answers_http(&mut service)
            && grpc_code(service.grpc, ("user", "after")).is_ok()),
        "{}",
        service.log()
    );
    // The watcher has descriptors again.
    service.config.write("more.yaml", "domain: more\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
    assert!(service.wait_log("config reloaded", 1), "{}", service.log());
}

// ---- M2: a stop with connections that never close ----

#[test]
fn sigterm_stops_by_the_deadline_and_gives_leases_back() {
    let redis = Server::start(&[]);
    let url = redis_url(&redis);
    let mut leased = start(
        &redis,
        &[
            "--lease",
            "10",
            "--shutdown-timeout-ms",
            "1500",
            "--header-timeout-ms",
            "60000",
            "--request-timeout-ms",
            "60000",
        ],
    );
    for _ in 0..3 {
        assert_eq!(
            grpc_code(leased.grpc, ("leased", "l")).unwrap(),
            Code::Ok as i32
        );
    }
    let plain = Service::start(&url, &[("hostile.yaml", CONFIG)], &[]);
    let left = |service: &Service| {
        let mut probe = descriptor(&[("leased", "l")]);
        probe.hits_addend = Some(UInt64Value { value: 0 });
        grpc_check(service.grpc, vec![probe]).unwrap().statuses[0].limit_remaining
    };
    assert!(left(&plain) <= 90, "a lease is out");
    // A half-sent HTTP request, a silent gRPC connection, a stream whose message never comes.
    let (pid, fds_before) = (leased.pid(), open_fds(leased.pid()));
    let mut half = TcpStream::connect(leased.http).unwrap();
    half.write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut silent = H2Flood::open(leased.grpc);
    let mut pending = H2Flood::open(leased.grpc);
    pending.open_streams(1, RLS_PATH, "application/grpc");
    silent.ping();
    pending.ping();
    // The service holds all three (and has read the pending stream) before it is stopped.
    assert!(
        wait_until(Duration::from_secs(10), || open_fds(pid) >= fds_before + 3
            && silent.read_up_to_the_ping()
            && pending.read_up_to_the_ping()),
        "the service never took the connections in"
    );
    let stopped = leased.terminate_within(Duration::from_secs(10));
    eprintln!("SIGTERM with connections that never finish: stopped after {stopped:?}");
    let (success, after) = stopped.unwrap_or_else(|| panic!("no exit:\n{}", leased.log()));
    assert!(success, "{}", leased.log());
    assert!(after < Duration::from_secs(5), "{after:?}");
    let log = leased.log();
    assert!(
        log.contains("the shutdown deadline (1500 ms) passed"),
        "{log}"
    );
    assert!(log.contains("giving leases back"), "{log}");
    assert_eq!(left(&plain), 97, "the unspent units came back");
    drop((half, silent, pending));
}

// ---- L6: bad token, TLS and body input ----

#[test]
fn bad_token_tls_and_body_input_is_refused_clearly() {
    let redis = Server::start(&[]);
    let url = redis_url(&redis);
    let dir = TempDir::new("l6");
    // A token no header can carry is refused at start, naming the file.
    let token = dir.0.join("token");
    std::fs::write(&token, "caf\u{e9}-token\n").unwrap();
    let (status, log) = Service::exit_at_start(
        &url,
        &[("hostile.yaml", CONFIG)],
        &["--http-token-file", token.to_str().unwrap()],
    );
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!(
            "{}: the token must be visible ASCII",
            token.display()
        )),
        "{log}"
    );
    // A TLS file that is not PEM fails naming the file, on either listener.
    let garbage = dir.0.join("garbage.pem");
    std::fs::write(&garbage, b"\x00\x01\x02 not pem").unwrap();
    for which in ["grpc", "http"] {
        let (cert, key) = (format!("--{which}-tls-cert"), format!("--{which}-tls-key"));
        let path = garbage.to_str().unwrap();
        let (status, log) = Service::exit_at_start(
            &url,
            &[("hostile.yaml", CONFIG)],
            &[&cert, path, &key, path],
        );
        assert_eq!(status.code(), Some(1), "{log}");
        assert!(
            log.contains(&format!("{path}: no PEM certificate")),
            "{which}: {log}"
        );
    }
    // The bearer scheme in any case.
    std::fs::write(&token, "s3cret\n").unwrap();
    let service = start(&redis, &["--http-token-file", token.to_str().unwrap()]);
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let value = format!("{scheme} s3cret");
        let reply = service.http(
            "POST",
            "/v1/check",
            &body("user", "t"),
            &[("Authorization", &value)],
        );
        assert_eq!(reply.status, 200, "{scheme}: {}", reply.body);
    }
    // The reference's /json is guarded alike.
    let reply = service.http("POST", "/json", &body("user", "t"), &[]);
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = service.http(
        "POST",
        "/json",
        &body("user", "t"),
        &[("Authorization", "Bearer s3cret")],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    // A body over 64 KiB: 413 as problem+json.
    let large = format!(
        r#"{{"domain":"hostile","descriptors":[],"pad":"{}"}}"#,
        "x".repeat(70 * 1024)
    );
    let reply = service.http(
        "POST",
        "/v1/check",
        &large,
        &[("Authorization", "Bearer s3cret")],
    );
    assert_problem(&reply, 413);
    // A gRPC message cut short: INVALID_ARGUMENT.
    let grpc = service.grpc;
    let status = on_runtime(async move {
        let tcp = tokio::net::TcpStream::connect(grpc).await.unwrap();
        let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(connection);
        let request = http::Request::post(format!("http://localhost{RLS_PATH}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut body) = client.send_request(request, false).unwrap();
        // The length prefix says 100 bytes; 10 follow, then the stream ends.
        let mut message = vec![0u8, 0, 0, 0, 100];
        message.extend_from_slice(&[0x0a, 0x08, b'h', b'o', b's', b't', b'i', b'l', b'e', 0]);
        body.send_data(bytes::Bytes::from(message), true).unwrap();
        let response = response.await.unwrap();
        let status = response
            .headers()
            .get("grpc-status")
            .map(|value| value.to_str().unwrap().to_string());
        match status {
            Some(status) => status,
            None => {
                let mut body = response.into_body();
                while body.data().await.is_some() {}
                body.trailers()
                    .await
                    .unwrap()
                    .and_then(|trailers| {
                        trailers
                            .get("grpc-status")
                            .map(|value| value.to_str().unwrap().to_string())
                    })
                    .unwrap_or_default()
            }
        }
    });
    assert_eq!(status, "3", "INVALID_ARGUMENT");
}

// ---- Risks: authentication, metrics, overrides, web pages ----

#[test]
fn callers_present_a_token_or_a_client_certificate() {
    let redis = Server::start(&[]);
    let dir = TempDir::new("grpc-auth");
    let token = dir.0.join("token");
    std::fs::write(&token, "grpc-s3cret\n").unwrap();
    let service = start(&redis, &["--grpc-token-file", token.to_str().unwrap()]);
    let address = service.grpc;
    let call = |authorization: Option<&'static str>| {
        on_runtime(async move {
            let mut client = RateLimitServiceClient::connect(format!("http://{address}"))
                .await
                .unwrap();
            let mut call =
                tonic::Request::new(request("hostile", vec![descriptor(&[("user", "g")])]));
            if let Some(value) = authorization {
                call.metadata_mut()
                    .insert("authorization", value.parse().unwrap());
            }
            client
                .should_rate_limit(call)
                .await
                .map(|response| response.into_inner().overall_code)
        })
    };
    assert_eq!(call(None).unwrap_err().code(), tonic::Code::Unauthenticated);
    assert_eq!(
        call(Some("Bearer wrong")).unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    assert_eq!(call(Some("bearer grpc-s3cret")).unwrap(), Code::Ok as i32);
    drop(service);

    // Mutual TLS: a client certificate the CA signed, or no connection.
    let certs = certificates(&dir.0);
    let service = start(
        &redis,
        &[
            "--grpc-tls-cert",
            certs.server_cert.to_str().unwrap(),
            "--grpc-tls-key",
            certs.server_key.to_str().unwrap(),
            "--grpc-tls-client-ca",
            certs.ca.to_str().unwrap(),
        ],
    );
    let address = service.grpc;
    let ca = std::fs::read(&certs.ca).unwrap();
    let identity = Identity::from_pem(
        std::fs::read(&certs.client_cert).unwrap(),
        std::fs::read(&certs.client_key).unwrap(),
    );
    let call = move |identity: Option<Identity>| {
        let ca = ca.clone();
        on_runtime(async move {
            let mut tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name("localhost");
            if let Some(identity) = identity {
                tls = tls.identity(identity);
            }
            let channel = Channel::from_shared(format!("https://{address}"))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .map_err(|error| tonic::Status::unavailable(error.to_string()))?;
            RateLimitServiceClient::new(channel)
                .should_rate_limit(request("hostile", vec![descriptor(&[("user", "m")])]))
                .await
                .map(|response| response.into_inner().overall_code)
        })
    };
    assert_eq!(call(Some(identity)).unwrap(), Code::Ok as i32);
    assert!(call(None).is_err(), "no client certificate, no call");
    drop(service);

    // The same on the HTTP listener.
    let service = start(
        &redis,
        &[
            "--http-tls-cert",
            certs.server_cert.to_str().unwrap(),
            "--http-tls-key",
            certs.server_key.to_str().unwrap(),
            "--http-tls-client-ca",
            certs.ca.to_str().unwrap(),
        ],
    );
    let client = (certs.client_cert.as_path(), certs.client_key.as_path());
    let admitted = tls_healthz(tls_client_as(service.http, &certs.ca, Some(client)));
    assert_eq!(admitted.unwrap(), "HTTP/1.1 200 OK");
    let refused = tls_healthz(tls_client_as(service.http, &certs.ca, None));
    assert!(
        refused.is_err(),
        "no client certificate, no answer: {refused:?}"
    );
}

#[test]
fn metrics_behind_the_token_and_detailed_values_bounded() {
    let redis = Server::start(&[]);
    let dir = TempDir::new("metrics");
    let token = dir.0.join("token");
    std::fs::write(&token, "m3trics\n").unwrap();
    let service = start(
        &redis,
        &[
            "--http-token-file",
            token.to_str().unwrap(),
            "--metrics-need-token",
            "--max-metric-rules",
            "50",
        ],
    );
    assert_eq!(service.http("GET", "/metrics", "", &[]).status, 401);
    let bearer = [("Authorization", "Bearer m3trics")];
    // 500 request values through a detailed_metric rule: at most 50 labels, the rest as one.
    for index in 0..500 {
        let reply = service.http(
            "POST",
            "/v1/check",
            &body("path", &format!("/api/key-{index}")),
            &bearer,
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let metrics = service.http("GET", "/metrics", "", &bearer).body;
    let labels = metrics
        .lines()
        .filter(|line| line.starts_with("ratelimit_service_descriptors_total{"))
        .count();
    eprintln!(
        "detailed_metric: 500 values, {labels} series, a {} byte scrape",
        metrics.len()
    );
    assert!(labels <= 51, "{labels} series:\n{metrics}");
    assert!(metrics.contains("rule=\"_other\""), "{metrics}");
}

#[test]
fn limit_overrides_can_be_refused_and_web_pages_are() {
    let redis = Server::start(&[]);
    let overriding = |service: &Service| {
        let mut raised = descriptor(&[("user", "o")]);
        raised.limit = Some(RateLimitOverride {
            requests_per_unit: 1_000_000_000,
            unit: 4,
        });
        grpc_check(service.grpc, vec![raised]).map(|_| ())
    };
    let default = start(&redis, &[]);
    assert!(
        overriding(&default).is_ok(),
        "overrides are the reference's semantics"
    );
    let strict = start(&redis, &["--limit-overrides", "refuse"]);
    let refused = overriding(&strict).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("limit overrides"),
        "{}",
        refused.message()
    );
    let json = r#"{"domain":"hostile","descriptors":[{"entries":[{"key":"user","value":"o"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"}}]}"#;
    let (status, problem) = strict.check_json(json);
    assert_eq!(status, 400, "{problem}");

    // Requests from web pages: an Origin not allowed, or a body that is not JSON.
    let check = body("user", "web");
    let reply = default.http(
        "POST",
        "/v1/check",
        &check,
        &[("Origin", "http://evil.example")],
    );
    assert_problem(&reply, 403);
    assert_problem(
        &http_with_type(default.http, "/v1/check", &check, Some("text/plain")),
        415,
    );
    assert_problem(
        &http_with_type(default.http, "/v1/check", &check, None),
        415,
    );
    // The reference's /json takes a body of any content type, as the reference does (its
    // own example posts with curl's form type): there the Origin alone keeps pages out.
    let types = [
        Some("application/json"),
        Some("application/x-www-form-urlencoded"),
        Some("text/plain"),
        None,
    ];
    for (index, content_type) in types.into_iter().enumerate() {
        let reference = body("user", &format!("json-{index}"));
        let reply = http_with_type(default.http, "/json", &reference, content_type);
        assert_eq!(reply.status, 200, "{content_type:?}: {}", reply.body);
        assert!(
            reply.body.contains(r#""overallCode":"OK""#),
            "{}",
            reply.body
        );
    }
    let reply = default.http(
        "POST",
        "/json",
        &check,
        &[("Origin", "http://evil.example")],
    );
    assert_problem(&reply, 403);
    let allowed = start(&redis, &["--http-allow-origin", "https://app.example"]);
    let reply = allowed.http(
        "POST",
        "/v1/check",
        &check,
        &[("Origin", "https://app.example")],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        allowed
            .http(
                "POST",
                "/v1/check",
                &check,
                &[("Origin", "https://other.example")]
            )
            .status,
        403
    );
}

/// A POST to `path` with the given content type (or none).
fn http_with_type(
    address: SocketAddr,
    path: &str,
    body: &str,
    content_type: Option<&str>,
) -> Reply {
    let content_type = content_type
        .map(|value| format!("Content-Type: {value}\r\n"))
        .unwrap_or_default();
    exchange(
        address,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{content_type}Content-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
}
