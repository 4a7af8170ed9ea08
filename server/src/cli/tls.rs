//! The listeners' TLS: each one's certificate chain, key and optional client CA.

use std::path::PathBuf;

use crate::tls::TlsFiles;

/// The flags of TLS.
#[derive(Clone, Debug, clap::Args)]
pub struct Tls {
    /// Serve gRPC over TLS: the certificate chain (with --grpc-tls-key)
    #[arg(long, value_name = "PEM")]
    pub grpc_tls_cert: Option<PathBuf>,

    /// Serve gRPC over TLS: the private key (with --grpc-tls-cert)
    #[arg(long, value_name = "PEM")]
    pub grpc_tls_key: Option<PathBuf>,

    /// Require a client certificate this CA signed on the gRPC listener (mutual TLS)
    #[arg(long, value_name = "PEM", requires = "grpc_tls_cert")]
    pub grpc_tls_client_ca: Option<PathBuf>,

    /// Serve HTTP over TLS: the certificate chain (with --http-tls-key)
    #[arg(long, value_name = "PEM")]
    pub http_tls_cert: Option<PathBuf>,

    /// Serve HTTP over TLS: the private key (with --http-tls-cert)
    #[arg(long, value_name = "PEM")]
    pub http_tls_key: Option<PathBuf>,

    /// Require a client certificate this CA signed on the HTTP listener (mutual TLS)
    #[arg(long, value_name = "PEM", requires = "http_tls_cert")]
    pub http_tls_client_ca: Option<PathBuf>,
}

impl Tls {
    /// gRPC's files, when its certificate and key are both given.
    pub fn grpc(&self) -> Option<TlsFiles> {
        files(
            &self.grpc_tls_cert,
            &self.grpc_tls_key,
            &self.grpc_tls_client_ca,
        )
    }

    /// HTTP's.
    pub fn http(&self) -> Option<TlsFiles> {
        files(
            &self.http_tls_cert,
            &self.http_tls_key,
            &self.http_tls_client_ca,
        )
    }

    /// The listener (`grpc`, `http`) whose certificate or key is given alone.
    pub fn unpaired(&self) -> Option<&'static str> {
        let alone = |cert: &Option<PathBuf>, key: &Option<PathBuf>| cert.is_some() != key.is_some();
        if alone(&self.grpc_tls_cert, &self.grpc_tls_key) {
            Some("grpc")
        } else if alone(&self.http_tls_cert, &self.http_tls_key) {
            Some("http")
        } else {
            None
        }
    }
}

fn files(
    cert: &Option<PathBuf>,
    key: &Option<PathBuf>,
    client_ca: &Option<PathBuf>,
) -> Option<TlsFiles> {
    Some(TlsFiles {
        cert: cert.clone()?,
        key: key.clone()?,
        client_ca: client_ca.clone(),
    })
}
