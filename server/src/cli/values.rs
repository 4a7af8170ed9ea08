//! The values flags take: their parsers (each refusal's text is what users see after the
//! flag's name) and the choices of the flags that take a name.

use std::net::SocketAddr;
use std::time::Duration;

use clap::ValueEnum;
use redis_ratelimit_client::Fallback;
use redis_ratelimit_client::store::BatchOptions;

use crate::header_settings::FieldsDraft;

/// A default shown in `--help` as a number's text, made once (clap takes `&'static str`).
macro_rules! shown {
    ($value:expr) => {{
        static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        TEXT.get_or_init(|| $value.to_string()).as_str()
    }};
}
pub(crate) use shown;

/// A listener's address, or none (`off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address(pub Option<SocketAddr>);

/// `--failure-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FailureMode {
    /// Admit every request.
    Allow,
    /// Deny every request.
    Deny,
    /// Decide locally, this replica's share of each limit.
    Local,
}

impl From<FailureMode> for Fallback {
    fn from(mode: FailureMode) -> Self {
        match mode {
            FailureMode::Allow => Fallback::Open,
            FailureMode::Deny => Fallback::Closed,
            FailureMode::Local => Fallback::Local,
        }
    }
}

/// `--headers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HeaderForm {
    /// No IETF fields.
    Off,
    /// `RateLimit: "name";r=R;t=T` and `RateLimit-Policy`.
    #[value(name = "draft-11")]
    Draft11,
    /// `RateLimit: "name";a=A;w=W;c=C` and `RateLimit-Policy`.
    #[value(name = "draft-12")]
    Draft12,
}

impl From<HeaderForm> for FieldsDraft {
    fn from(form: HeaderForm) -> Self {
        match form {
            HeaderForm::Off => FieldsDraft::Off,
            HeaderForm::Draft11 => FieldsDraft::Draft11,
            HeaderForm::Draft12 => FieldsDraft::Draft12,
        }
    }
}

/// `--log-level` (the reference's `LOG_LEVEL` names, any case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Each request's decision steps.
    Debug,
    /// Start, stop, reloads.
    Info,
    /// What goes wrong and is worked around.
    #[value(alias = "warning")]
    Warn,
    /// What fails.
    #[value(alias = "fatal", alias = "panic")]
    Error,
}

impl From<LogLevel> for tracing::Level {
    fn from(level: LogLevel) -> Self {
        match level {
            LogLevel::Trace => tracing::Level::TRACE,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Error => tracing::Level::ERROR,
        }
    }
}

/// `--limit-overrides`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LimitOverrides {
    /// Honour a descriptor's limit.
    Allow,
    /// Refuse a request with one.
    Refuse,
}

/// `--limit-overrides` as the request bounds hold it: whether a descriptor's limit is
/// honoured.
pub fn limit_overrides() -> impl clap::builder::TypedValueParser<Value = bool> {
    use clap::builder::TypedValueParser;
    clap::builder::EnumValueParser::<LimitOverrides>::new()
        .map(|policy| policy == LimitOverrides::Allow)
}

pub fn listen(text: &str) -> Result<Address, String> {
    if text == "off" {
        return Ok(Address(None));
    }
    text.parse()
        .map(|address| Address(Some(address)))
        .map_err(|_| "an address such as 127.0.0.1:8081, or 'off'".to_string())
}

pub fn count(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| "a non-negative integer is expected".to_string())
}

/// A count whose 0 means none.
pub fn count_or_none(text: &str) -> Result<Option<u64>, String> {
    count(text).map(|value| (value > 0).then_some(value))
}

/// Milliseconds whose 0 means never.
pub fn ms_or_never(text: &str) -> Result<Option<Duration>, String> {
    count_or_none(text).map(|ms| ms.map(Duration::from_millis))
}

pub fn ms(text: &str) -> Result<Duration, String> {
    count(text).map(Duration::from_millis)
}

/// The longest RLQS assignment life (`--rlqs-ttl-ms`): the tokens a lease may hold
/// unspent for Envoy grow with it (docs/rlqs.md).
pub const MAX_RLQS_TTL: Duration = Duration::from_secs(3_600);

/// An RLQS assignment's life: 2 ms to [`MAX_RLQS_TTL`].
pub fn rlqs_ttl(text: &str) -> Result<Duration, String> {
    let ttl = ms(text)?;
    if ttl < Duration::from_millis(2) || ttl > MAX_RLQS_TTL {
        return Err(format!(
            "from 2 to {} ms is expected",
            MAX_RLQS_TTL.as_millis()
        ));
    }
    Ok(ttl)
}

/// The most worker threads `--worker-threads` takes.
const MAX_WORKER_THREADS: usize = 1024;

pub fn worker_threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(threads @ 1..=MAX_WORKER_THREADS) => Ok(threads),
        _ => Err(format!(
            "a number of threads from 1 to {MAX_WORKER_THREADS} is expected"
        )),
    }
}

fn positive(text: &str) -> Result<u64, String> {
    match count(text)? {
        0 => Err("must be above 0".into()),
        value => Ok(value),
    }
}

pub fn positive_ms(text: &str) -> Result<Duration, String> {
    positive(text).map(Duration::from_millis)
}

pub fn batch_window(text: &str) -> Result<Duration, String> {
    match count(text)? {
        window @ 0..=100_000 => Ok(Duration::from_micros(window)),
        _ => Err("is at most 100000 (0.1 s)".into()),
    }
}

pub fn batch_max(text: &str) -> Result<usize, String> {
    let limit = BatchOptions::LIMIT_MAX;
    match usize::try_from(count(text)?) {
        Ok(max @ 1..) if max <= limit => Ok(max),
        _ => Err(format!("is 1 to {limit}")),
    }
}

/// At least one, and 0 read as 1.
pub fn at_least_one_u64(text: &str) -> Result<u64, String> {
    Ok(count(text)?.max(1))
}

/// [`at_least_one_u64`] as a size.
/// A ratio from 0 to 1 (the reference's `NEAR_LIMIT_RATIO`).
pub fn ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err("a ratio from 0 to 1 is expected (0.8: 80 % of the limit used)".into()),
    }
}

/// A summary's size, at most [`MAX_TOP_KEYS`]; 0 turns it off.
pub fn top_keys(text: &str) -> Result<usize, String> {
    match count(text)? {
        keys @ 0..=MAX_TOP_KEYS => Ok(usize::try_from(keys).unwrap_or(0)),
        _ => Err(format!("is 0 (off) to {MAX_TOP_KEYS} keys per summary")),
    }
}

/// The largest top-keys summary `--top-keys` takes.
pub const MAX_TOP_KEYS: u64 = 4_096;

pub fn at_least_one(text: &str) -> Result<usize, String> {
    at_least_one_u64(text).map(|value| usize::try_from(value).unwrap_or(usize::MAX))
}

pub fn streams(text: &str) -> Result<u32, String> {
    u32::try_from(at_least_one(text)?).map_err(|_| "at most 4294967295".to_string())
}

pub fn max_descriptors(text: &str) -> Result<usize, String> {
    match count(text)? {
        max @ 1..=16 => Ok(usize::try_from(max).unwrap_or(16)),
        _ => Err("is 1 to 16 (one RL.MULTI takes 16 keys)".into()),
    }
}
