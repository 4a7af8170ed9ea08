//! The operator console's listener: its address (off by default), who may use it (the
//! users file: each user's role, name and token), and its TLS, mutual TLS naming users by
//! their client certificate.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::values::{Address, listen};
use crate::tls::TlsFiles;

/// The flags of the console.
#[derive(Clone, Debug, clap::Args)]
pub struct Admin {
    /// The operator console and its JSON API (/admin/, /admin/v1/*) on ADDR [default: off]
    #[arg(long, value_name = "ADDR", value_parser = listen, requires = "admin_users_file")]
    pub admin_listen: Option<Address>,

    /// Who may use the console: one user a line, 'editor NAME TOKEN' or 'viewer NAME
    /// TOKEN' (without TOKEN: the client certificate whose common name is NAME, with
    /// --admin-tls-client-ca); read again when it changes
    #[arg(long, value_name = "PATH")]
    pub admin_users_file: Option<PathBuf>,

    /// Serve the console over TLS: the certificate chain (with --admin-tls-key)
    #[arg(long, value_name = "PEM")]
    pub admin_tls_cert: Option<PathBuf>,

    /// Serve the console over TLS: the private key (with --admin-tls-cert)
    #[arg(long, value_name = "PEM")]
    pub admin_tls_key: Option<PathBuf>,

    /// Require a client certificate this CA signed on the console (mutual TLS): its
    /// common name is the user's name in --admin-users-file
    #[arg(long, value_name = "PEM", requires = "admin_tls_cert")]
    pub admin_tls_client_ca: Option<PathBuf>,
}

impl Admin {
    /// The console's address (`None`: off).
    pub fn address(&self) -> Option<SocketAddr> {
        self.admin_listen.and_then(|address| address.0)
    }

    /// Its TLS files, when its certificate and key are both given.
    pub fn tls(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.admin_tls_cert.clone()?,
            key: self.admin_tls_key.clone()?,
            client_ca: self.admin_tls_client_ca.clone(),
        })
    }

    /// Whether its certificate or key is given alone.
    pub fn unpaired(&self) -> bool {
        self.admin_tls_cert.is_some() != self.admin_tls_key.is_some()
    }
}
