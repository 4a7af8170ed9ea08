//! TLS for both listeners (rustls with ring, TLS 1.2 and 1.3): a certificate chain and key,
//! and optionally a client CA, which makes the listener require a client certificate it
//! signed (mutual TLS). Every file is read at start and a bad one named; a certificate
//! expired or not yet valid is warned about ([`certificate`](crate::certificate)).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

/// A listener's TLS files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM).
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
    /// The CA whose client certificates are required (PEM), if any.
    pub client_ca: Option<PathBuf>,
}

/// Why a listener's TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file is unreadable or not what it should be.
    #[error("{}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The files do not make a TLS config (a key that does not match its certificate).
    #[error("{}: {reason}", cert.display())]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// What rustls said.
        reason: String,
    },
}

fn file_error(path: &Path, reason: impl ToString) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|error| file_error(path, error))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| file_error(path, error))?;
    if certs.is_empty() {
        return Err(file_error(
            path,
            format!("no PEM certificate in the file (expected {what})"),
        ));
    }
    Ok(certs)
}

/// The acceptor of `listener`, offering `alpn` (the protocols it speaks, by preference).
pub fn acceptor(
    files: &TlsFiles,
    listener: &'static str,
    alpn: &[&[u8]],
) -> Result<TlsAcceptor, TlsError> {
    let certs = certificates(&files.cert, "the server's certificate chain")?;
    if let Some(leaf) = certs.first() {
        crate::certificate::check_served(listener, &files.cert, leaf);
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|error| {
        file_error(
            &files.key,
            format!("no PEM private key in the file ({error})"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Config {
            cert: files.cert.clone(),
            reason: error.to_string(),
        })?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca, "the client CA")? {
                roots
                    .add(cert)
                    .map_err(|error| file_error(ca, format!("not a CA certificate: {error}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| file_error(ca, error))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|error| TlsError::Config {
            cert: files.cert.clone(),
            reason: error.to_string(),
        })?;
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_file_that_is_not_pem_is_named() {
        let dir = std::env::temp_dir().join(format!("rls-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, b"\x00\x01 not a certificate").unwrap();
        let files = TlsFiles {
            cert: garbage.clone(),
            key: garbage.clone(),
            client_ca: None,
        };
        let error = acceptor(&files, "test", &[]).err().unwrap().to_string();
        assert!(error.starts_with(&garbage.display().to_string()), "{error}");
        assert!(error.contains("no PEM certificate"), "{error}");
        let missing = dir.join("missing.pem");
        let files = TlsFiles {
            cert: missing.clone(),
            ..files
        };
        let error = acceptor(&files, "test", &[]).err().unwrap().to_string();
        assert!(error.starts_with(&missing.display().to_string()), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
