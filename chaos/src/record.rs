//! The logs the checker works from: one line per decision, written by every client process,
//! and one line per fault, written by the soak. Instants are microseconds of the host's
//! real-time clock, which every process on the machine shares.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since 1970 on this host's clock.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Who decided a check, as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Store,
    Lease,
    Cache,
    Fallback,
    /// `check` itself returned an error.
    Error,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Lease => "lease",
            Self::Cache => "cache",
            Self::Fallback => "fallback",
            Self::Error => "error",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "store" => Self::Store,
            "lease" => Self::Lease,
            "cache" => Self::Cache,
            "fallback" => Self::Fallback,
            "error" => Self::Error,
            _ => return None,
        })
    }
}

/// One check a client made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionRecord {
    pub client: u32,
    pub limiter: String,
    pub cost: u64,
    pub allowed: bool,
    pub source: Source,
    /// When the client called `check`.
    pub send_us: u64,
    /// When `check` returned.
    pub recv_us: u64,
    /// For an admitted in-flight check: when the client began releasing its slot.
    pub release_us: Option<u64>,
}

impl DecisionRecord {
    /// `D client limiter cost A|D source send_us recv_us [release_us]`.
    pub fn line(&self) -> String {
        let mut line = format!(
            "D {} {} {} {} {} {} {}",
            self.client,
            self.limiter,
            self.cost,
            if self.allowed { "A" } else { "D" },
            self.source.as_str(),
            self.send_us,
            self.recv_us
        );
        if let Some(release) = self.release_us {
            line.push_str(&format!(" {release}"));
        }
        line
    }

    pub fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() != Some(&"D") {
            return None;
        }
        Some(Self {
            client: fields.get(1)?.parse().ok()?,
            limiter: (*fields.get(2)?).to_string(),
            cost: fields.get(3)?.parse().ok()?,
            allowed: *fields.get(4)? == "A",
            source: Source::parse(fields.get(5)?)?,
            send_us: fields.get(6)?.parse().ok()?,
            recv_us: fields.get(7)?.parse().ok()?,
            release_us: fields.get(8).and_then(|field| field.parse().ok()),
        })
    }
}

/// The kinds of fault the soak injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// `docker kill` (SIGKILL) of a primary, then `docker start`.
    Kill,
    /// SIGSTOP of a node, SIGCONT later.
    Stop,
    /// `docker network disconnect` of a node, reconnected later.
    Partition,
    /// `docker restart` of a node (SIGTERM, start).
    Restart,
    /// `CLUSTER FAILOVER` on a replica (coordinated: no write lost).
    Failover,
    /// Added latency on the proxied node's link.
    Latency,
    /// The proxied link forwards nothing for a while.
    Stall,
    /// Every connection through the proxy reset.
    Reset,
}

impl FaultKind {
    pub const ALL: [FaultKind; 8] = [
        Self::Kill,
        Self::Stop,
        Self::Partition,
        Self::Restart,
        Self::Failover,
        Self::Latency,
        Self::Stall,
        Self::Reset,
    ];

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Stop => "stop",
            Self::Partition => "partition",
            Self::Restart => "restart",
            Self::Failover => "failover",
            Self::Latency => "latency",
            Self::Stall => "stall",
            Self::Reset => "reset",
        }
    }

    /// Whether writes a node acknowledged can be lost to this fault (a primary cut off,
    /// stopped, killed or restarted while clients write to it): the README's partition and
    /// unreplicated-tail bounds apply. A coordinated failover and the proxy's faults lose
    /// nothing: nothing extra is allowed for them.
    pub fn can_lose_writes(self) -> bool {
        matches!(
            self,
            Self::Kill | Self::Stop | Self::Partition | Self::Restart
        )
    }
}

/// One fault, from its injection to the moment the cluster was healthy again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRecord {
    pub kind: FaultKind,
    /// The node's address.
    pub target: String,
    /// The node's role when the fault began (`primary` or `replica`).
    pub role: String,
    pub start_us: u64,
    pub end_us: u64,
    pub detail: String,
    /// The limiters whose primary the fault hit (their writes could be lost); empty for a
    /// fault on a replica or one that loses no write.
    pub affected: Vec<String>,
    /// The limiters served by the target's shard (whether it was their primary or its
    /// replica): the others are on healthy shards.
    pub shard: Vec<String>,
}

impl FaultRecord {
    /// `F kind target role start_us end_us affected,limiters shard,limiters detail...`.
    pub fn line(&self) -> String {
        let list = |names: &[String]| {
            if names.is_empty() {
                "-".to_string()
            } else {
                names.join(",")
            }
        };
        format!(
            "F {} {} {} {} {} {} {} {}",
            self.kind.as_str(),
            self.target,
            self.role,
            self.start_us,
            self.end_us,
            list(&self.affected),
            list(&self.shard),
            self.detail
        )
    }

    pub fn parse(line: &str) -> Option<Self> {
        let mut fields = line.splitn(9, ' ');
        if fields.next() != Some("F") {
            return None;
        }
        let kind = FaultKind::parse(fields.next()?)?;
        let target = fields.next()?.to_string();
        let role = fields.next()?.to_string();
        let start_us = fields.next()?.parse().ok()?;
        let end_us = fields.next()?.parse().ok()?;
        let list = |text: &str| -> Vec<String> {
            if text == "-" {
                Vec::new()
            } else {
                text.split(',').map(str::to_string).collect()
            }
        };
        let affected = list(fields.next()?);
        let shard = list(fields.next()?);
        Some(Self {
            kind,
            target,
            role,
            start_us,
            end_us,
            detail: fields.next().unwrap_or_default().to_string(),
            affected,
            shard,
        })
    }
}

/// Every record of a log file, parsed by `parse`; a line that does not parse is an error
/// naming the file and the line.
pub fn read_lines<T>(
    path: &std::path::Path,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            parse(line)
                .ok_or_else(|| format!("{}:{}: cannot parse {line:?}", path.display(), number + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_what_they_wrote() {
        let decision = DecisionRecord {
            client: 2,
            limiter: "inflight0".into(),
            cost: 1,
            allowed: true,
            source: Source::Fallback,
            send_us: 10,
            recv_us: 20,
            release_us: Some(30),
        };
        assert_eq!(DecisionRecord::parse(&decision.line()), Some(decision));
        let fault = FaultRecord {
            kind: FaultKind::Stall,
            target: "10.1.0.11".into(),
            role: "primary".into(),
            start_us: 5,
            end_us: 9,
            detail: "stalled 700 ms through the proxy".into(),
            affected: Vec::new(),
            shard: vec!["tb0".into(), "log1".into()],
        };
        assert_eq!(FaultRecord::parse(&fault.line()), Some(fault));
        assert_eq!(FaultRecord::parse("D 1 2"), None);
    }
}
