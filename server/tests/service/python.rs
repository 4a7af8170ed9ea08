//! The independent client: Python stubs generated from Envoy's own protos (the PyPI package
//! `envoy-data-plane`, sync over grpcio and async over grpclib), installed in a venv under
//! the target directory on first run (`tests/python/requirements.txt`, pinned).

use std::path::{Path, PathBuf};
use std::process::Command;

use redis_ratelimit_testkit::server::Server;

use crate::harness::Service;

const CONFIG: &str = r#"
domain: py
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 10, name: per-team}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 100, name: per-route}
"#;

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("python")
}

/// The venv's python, installing the pinned requirements if they changed.
fn venv_python() -> PathBuf {
    // The tests of this file run in parallel: one installs, the others wait.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("service-venv");
    let python = venv.join("bin").join("python");
    let requirements = tests_dir().join("requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).unwrap();
    let marker = venv.join("installed-requirements.txt");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return python;
    }
    let created = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap_or_else(|error| panic!("python3 is needed for the Python client test: {error}"));
    assert!(
        created.success(),
        "python3 -m venv failed: install python3-venv (scripts/prereqs.sh does)"
    );
    let installed = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(&requirements)
        .status()
        .unwrap();
    assert!(
        installed.success(),
        "pip install -r {} failed",
        requirements.display()
    );
    std::fs::write(&marker, wanted).unwrap();
    python
}

#[test]
fn the_envoy_data_plane_python_client() {
    let python = venv_python();
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let service = Service::start(&url, &[("py.yaml", CONFIG)], &[]);
    let output = Command::new(python)
        .arg(tests_dir().join("rls_client.py"))
        .arg(service.grpc.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the Python client failed:\n{}\n{}\nservice log:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        service.log()
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("all checks passed"));
}

/// A self-signed certificate for 127.0.0.1 (openssl), in `dir`: (cert, key).
pub fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap_or_else(|error| {
            panic!("openssl is needed to make the TLS test's certificate: {error}")
        });
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    (cert, key)
}

/// Redis serving TLS on a port of its own (returned) with the certificate `cert`, `key`,
/// and an ACL user `rls` (password `rls-secret`) on keys `keys`.
pub fn tls_redis(cert: &Path, key: &Path, keys: &str) -> (Server, String) {
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let (cert_arg, key_arg) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let redis = Server::start(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        cert_arg,
        "--tls-key-file",
        key_arg,
        "--tls-ca-cert-file",
        cert_arg,
        "--tls-auth-clients",
        "no",
        "--user",
        "rls",
        "on",
        ">rls-secret",
        keys,
        "+@all",
    ]);
    (redis, tls_port)
}

/// Redis over TLS only (`rediss://`) with an ACL user, and both listeners over TLS.
#[test]
fn tls_everywhere_and_an_acl_user() {
    let python = venv_python();
    let dir = crate::harness::TempDir::new("tls");
    let (cert, key) = certificate(&dir.0);
    let (redis, tls_port) = tls_redis(&cert, &key, "~rls:*");
    let (cert_arg, key_arg) = (cert.to_str().unwrap(), key.to_str().unwrap());
    // The plain port stays for the test kit; the service speaks TLS, as the user `rls`
    // (`#insecure`: the test's self-signed certificate is not in the webpki roots).
    let url = format!("rediss://rls:rls-secret@127.0.0.1:{tls_port}/#insecure");
    let service = Service::start(
        &url,
        &[("py.yaml", CONFIG)],
        &[
            "--grpc-tls-cert",
            cert_arg,
            "--grpc-tls-key",
            key_arg,
            "--http-tls-cert",
            cert_arg,
            "--http-tls-key",
            key_arg,
        ],
    );
    assert!(service.log().contains("(TLS)"), "{}", service.log());
    let output = Command::new(python)
        .arg(tests_dir().join("tls_client.py"))
        .arg(service.grpc.to_string())
        .arg(service.http.to_string())
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the TLS client failed:\n{}\n{}\nservice log:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        service.log()
    );
    let mut con = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("rls:*").query(&mut con).unwrap();
    assert_eq!(
        keys.len(),
        1,
        "the limit lives in Redis, reached over TLS: {keys:?}"
    );
}

/// The example Envoy config is a valid v3 bootstrap (read into Envoy's own protos), whose
/// rate limit filter asks the domain the example config defines.
#[test]
fn the_example_envoy_config_is_valid() {
    let python = venv_python();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/envoy");
    let output = Command::new(python)
        .arg(tests_dir().join("validate_envoy.py"))
        .arg(examples.join("envoy.yaml"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // And the service accepts the example limits.
    let redis = Server::start(&[]);
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let config = std::fs::read_to_string(examples.join("config/edge.yaml")).unwrap();
    let service = Service::start(&url, &[("edge.yaml", &config)], &[]);
    let (status, answer) = service.check_json(
        r#"{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"alice"}]},{"entries":[{"key":"api_key","value":"alice"},{"key":"path","value":"/search?q=x"}]},{"entries":[{"key":"remote_address","value":"10.0.0.1"}]},{"entries":[{"key":"generic_key","value":"edge"}]}]}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(answer["allowed"], true, "{answer}");
    let names: Vec<&str> = answer["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|status| status["currentLimit"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["per-key", "per-key-search", "per-ip", "global"]);
}
