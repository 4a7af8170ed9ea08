//! Who may call: the bearer tokens of each listener and the web origins of the HTTP API.

use std::path::PathBuf;

/// The flags of access.
#[derive(Clone, Debug, clap::Args)]
pub struct Access {
    /// Require 'Authorization: Bearer <token>' on /v1/* and /json (token read from PATH)
    #[arg(long, value_name = "PATH")]
    pub http_token_file: Option<PathBuf>,

    /// Require 'authorization: Bearer <token>' in every gRPC call's metadata (token read
    /// from PATH)
    #[arg(long, value_name = "PATH")]
    pub grpc_token_file: Option<PathBuf>,

    /// /metrics requires the --http-token-file token too
    #[arg(long, requires = "http_token_file")]
    pub metrics_need_token: bool,

    /// An Origin whose web pages may call the HTTP API (repeatable); a request from any
    /// other Origin is refused
    #[arg(long = "http-allow-origin", value_name = "ORIGIN")]
    pub http_allowed_origins: Vec<String>,
}
