//! How answers are made: the RateLimit header fields and the global shadow mode.

use super::values::HeaderForm;
use crate::header_settings::HeaderSettings;

/// The flags of the answers.
#[derive(Clone, Debug, clap::Args)]
pub struct Answers {
    /// The IETF RateLimit fields
    #[arg(long, value_name = "FORM", value_enum, default_value = "draft-11")]
    pub headers: HeaderForm,

    /// Send the RateLimit fields on denials only
    #[arg(long)]
    pub headers_on_denied_only: bool,

    /// Also X-RateLimit-Limit, -Remaining, -Reset
    #[arg(long)]
    pub legacy_headers: bool,

    /// The header fields, as [`super::parse`] reads these flags and the reference's.
    #[arg(skip)]
    pub fields: HeaderSettings,

    /// Report every denial (per descriptor, in metrics) but admit every request: the
    /// global shadow mode, for a migration
    #[arg(long, env = "SHADOW_MODE")]
    pub shadow_mode: bool,
}
