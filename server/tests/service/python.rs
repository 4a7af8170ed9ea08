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
