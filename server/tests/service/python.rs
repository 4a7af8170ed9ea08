//! The independent client: Python stubs generated from Envoy's own protos (the PyPI package
//! `envoy-data-plane`, sync over grpcio and async over grpclib), in the tests' venv
//! (`tests/python/requirements.txt`, pinned).

use std::path::Path;
use std::process::Command;

use redis_ratelimit_testkit::server::Server;

use crate::harness::{Service, certificate, tls_redis};
use crate::venv::{tests_dir, venv_python};

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

/// Redis over TLS only (`rediss://`) with an ACL user, and both listeners over TLS.
#[test]
fn tls_everywhere_and_an_acl_user() {
    let python = venv_python();
    let dir = crate::harness::TempDir::new("tls");
    let (cert, key) = certificate(&dir.0);
    let (redis, tls_port) = tls_redis(
        &cert,
        &key,
        &["--user", "rls", "on", ">rls-secret", "~rls:*", "+@all"],
    );
    let (cert_arg, key_arg) = (cert.to_str().unwrap(), key.to_str().unwrap());
    // The service speaks TLS, as the user `rls` (`#insecure`: the test's self-signed certificate is not in the webpki roots).
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
