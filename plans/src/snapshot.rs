//! One consistent reading of the policy store, how it is encoded in Redis, and the rule that
//! decides a tenant's limits from it.
//!
//! Precedence, for each named limit: an override of the exact tenant, then the override of
//! the longest matching wildcard, then the tenant's plan, then the policy's defaults. An
//! override replaces one named limit (adding it if the layer below lacks it) or, given as
//! `all`, the whole set below it. An override past its expiry is ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;

use super::spec::{LimitSpec, Pattern, SpecError, check_tenant};
use super::table::Table;

/// An override entry: for one pattern, either one named limit or all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    /// Who it applies to.
    pub pattern: Pattern,
    /// `None`: the whole set is replaced by `limits`; `Some(name)`: only that limit.
    pub limit: Option<String>,
    /// The replacing limits (exactly one, named `limit`, when `limit` is set).
    pub limits: Vec<LimitSpec>,
    /// When it stops applying (milliseconds since the Unix epoch, Redis's clock).
    pub expires_at_ms: Option<u64>,
}

impl Override {
    /// The field of the overrides hash: `PATTERN` for all limits, `PATTERN LIMIT` for one.
    pub fn field(&self) -> String {
        field(&self.pattern, self.limit.as_deref())
    }

    /// Whether it applies at `now_ms`.
    pub fn live(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_none_or(|at| at > now_ms)
    }

    /// The value stored under [`field`](Self::field): `[expires=MS ]LIMIT...`.
    pub fn encode_value(&self) -> String {
        let mut words: Vec<String> = Vec::new();
        if let Some(at) = self.expires_at_ms {
            words.push(format!("expires={at}"));
        }
        words.extend(self.limits.iter().map(ToString::to_string));
        words.join(" ")
    }

    fn decode(field: &str, value: &str) -> Result<Override, SpecError> {
        let (pattern, limit) = match field.split_once(' ') {
            Some((pattern, limit)) => (pattern, Some(limit.to_string())),
            None => (field, None),
        };
        let pattern = Pattern::parse(pattern)?;
        let mut expires_at_ms = None;
        let mut limits = Vec::new();
        for word in value.split_whitespace() {
            match word.strip_prefix("expires=") {
                Some(at) => {
                    expires_at_ms = Some(at.parse().map_err(|_| {
                        SpecError(format!("override '{field}': bad expiry '{at}'"))
                    })?);
                }
                None => limits.push(LimitSpec::parse(word)?),
            }
        }
        let one_named = match (&limit, limits.as_slice()) {
            (Some(name), [spec]) => spec.name() == name,
            (Some(_), _) => false,
            (None, specs) => !specs.is_empty(),
        };
        if !one_named {
            return Err(SpecError(format!(
                "override '{field}' holds '{value}', not its limits"
            )));
        }
        Ok(Override {
            pattern,
            limit,
            limits,
            expires_at_ms,
        })
    }
}

/// The overrides hash field of `pattern` and, for a one-limit override, `limit`.
pub fn field(pattern: &Pattern, limit: Option<&str>) -> String {
    match limit {
        Some(limit) => format!("{pattern} {limit}"),
        None => pattern.to_string(),
    }
}

/// A plan's limits as stored: the limit texts separated by spaces.
pub fn encode_limits(limits: &[LimitSpec]) -> String {
    limits
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

fn decode_limits(plan: &str, value: &str) -> Result<Vec<LimitSpec>, SpecError> {
    let limits = value
        .split_whitespace()
        .map(LimitSpec::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| SpecError(format!("plan '{plan}': {error}")))?;
    if limits.is_empty() {
        return Err(SpecError(format!("plan '{plan}' has no limits")));
    }
    Ok(limits)
}

/// A field of the store this version cannot read (written by hand, or by a newer version:
/// a kind it does not know), left out of the snapshot that lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    /// The hash it is in.
    pub table: Table,
    /// The field.
    pub field: String,
    /// Its value, as stored.
    pub value: String,
    /// Why it cannot be read.
    pub reason: SpecError,
}

/// The policy store at one version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Incremented by every change (0: nothing was ever written).
    pub version: u64,
    /// Which change made this version: the server's instant of it, in µs (empty for a store
    /// never changed by this version of the library). A store wiped or restored from an older
    /// backup and changed again reaches versions it had before, with other contents: the
    /// version and the stamp together name one content.
    pub stamp: String,
    /// Plan name -> its limits.
    pub plans: BTreeMap<String, Vec<LimitSpec>>,
    /// Tenant -> plan name.
    pub tenants: BTreeMap<String, String>,
    /// Overrides hash field -> override.
    pub overrides: BTreeMap<String, Override>,
    /// The fields left out because they cannot be read (empty when the store was read whole).
    pub unreadable: Vec<Unreadable>,
}

/// Where an effective limit comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The policy's own default.
    Default,
    /// The tenant's plan.
    Plan(String),
    /// An override (exact or wildcard), with its expiry.
    Override {
        /// The override's pattern.
        pattern: Pattern,
        /// Its expiry, if temporary.
        expires_at_ms: Option<u64>,
    },
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Default => f.write_str("policy default"),
            Rule::Plan(plan) => write!(f, "plan {plan}"),
            Rule::Override {
                pattern,
                expires_at_ms,
            } => {
                let kind = match pattern {
                    Pattern::Exact(_) => "override",
                    Pattern::Prefix(_) => "wildcard override",
                };
                write!(f, "{kind} '{pattern}'")?;
                if let Some(at) = expires_at_ms {
                    write!(f, " until {at} ms")?;
                }
                Ok(())
            }
        }
    }
}

/// One limit that applies to a tenant, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    /// The limit.
    pub spec: LimitSpec,
    /// The rule it comes from.
    pub rule: Rule,
}

impl Snapshot {
    /// Decodes the store's hashes (field, value pairs) read at `version`: a field that
    /// cannot be read is left out and listed in [`unreadable`](Self::unreadable), so one bad
    /// field never hides the others (nor blocks its own repair).
    pub fn decode(
        version: u64,
        plans: Vec<(String, String)>,
        tenants: Vec<(String, String)>,
        overrides: Vec<(String, String)>,
    ) -> Snapshot {
        let mut snapshot = Snapshot {
            version,
            tenants: tenants.into_iter().collect(),
            ..Snapshot::default()
        };
        for (name, value) in plans {
            match decode_limits(&name, &value) {
                Ok(limits) => {
                    snapshot.plans.insert(name, limits);
                }
                Err(reason) => snapshot.unreadable.push(Unreadable {
                    table: Table::Plans,
                    field: name,
                    value,
                    reason,
                }),
            }
        }
        for (field, value) in overrides {
            match Override::decode(&field, &value) {
                Ok(entry) => {
                    snapshot.overrides.insert(field, entry);
                }
                Err(reason) => snapshot.unreadable.push(Unreadable {
                    table: Table::Overrides,
                    field,
                    value,
                    reason,
                }),
            }
        }
        snapshot
    }

    /// The tenants this store names, each once and in order: those on a plan, and those of
    /// an exact override (a wildcard names no one tenant).
    pub fn named_tenants(&self) -> BTreeSet<&str> {
        let on_plans = self.tenants.keys().map(String::as_str);
        let overridden = self
            .overrides
            .values()
            .filter_map(|entry| match &entry.pattern {
                Pattern::Exact(tenant) => Some(tenant.as_str()),
                Pattern::Prefix(_) => None,
            });
        on_plans.chain(overridden).collect()
    }

    /// The unreadable field `field` of `table`, if it is one.
    pub fn unreadable_field(&self, table: Table, field: &str) -> Option<&Unreadable> {
        self.unreadable
            .iter()
            .find(|entry| entry.table == table && entry.field == field)
    }

    /// The live entries of the pattern written `text` (`acme`, `acme-*`): its fields are
    /// `text` and `text LIMIT`, contiguous in field order (a space sorts before every
    /// character an id may hold).
    fn live_entries<'a>(
        &'a self,
        text: &'a str,
        now_ms: u64,
    ) -> impl Iterator<Item = &'a Override> {
        self.overrides
            .range::<str, _>((Bound::Included(text), Bound::Unbounded))
            .take_while(move |(field, _)| {
                field
                    .strip_prefix(text)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
            })
            .map(|(_, entry)| entry)
            .filter(move |entry| entry.live(now_ms))
    }

    /// The limits that apply to `tenant` at `now_ms`, given the policy's `defaults`, in
    /// order: the base set's order, then limits overrides added.
    ///
    /// A value the store would refuse as a tenant id (a space, `*`, `{`, `}`, a control
    /// character, over 256 bytes) is no tenant: no plan and no exact override name it (else
    /// `acme per-minute` would find the field of acme's one-limit override); wildcard
    /// overrides apply to it by prefix, as to any value, so `*` still covers every request.
    pub fn resolve(&self, tenant: &str, defaults: &[LimitSpec], now_ms: u64) -> Vec<Effective> {
        let is_tenant = check_tenant(tenant).is_ok();
        let plan = self
            .tenants
            .get(tenant)
            .filter(|_| is_tenant)
            .and_then(|plan| Some((plan, self.plans.get(plan)?)));
        let mut limits: Vec<Effective> = match plan {
            Some((plan, specs)) => specs
                .iter()
                .map(|spec| Effective {
                    spec: spec.clone(),
                    rule: Rule::Plan(plan.clone()),
                })
                .collect(),
            None => defaults
                .iter()
                .map(|spec| Effective {
                    spec: spec.clone(),
                    rule: Rule::Default,
                })
                .collect(),
        };
        // The longest wildcard with a live entry, then the exact id: found by key, in
        // O(id length × log overrides), never by scanning every override.
        let mut text = String::with_capacity(tenant.len().saturating_add(1));
        let longest_wildcard = (0..=tenant.len())
            .rev()
            .filter_map(|length| tenant.get(..length))
            .find(|prefix| {
                text.clear();
                text.push_str(prefix);
                text.push('*');
                self.live_entries(&text, now_ms).next().is_some()
            })
            .map(|prefix| Pattern::Prefix(prefix.to_string()));
        let exact = is_tenant.then(|| Pattern::Exact(tenant.to_string()));
        let layers = [longest_wildcard, exact];
        for pattern in layers.into_iter().flatten() {
            let text = pattern.to_string();
            let entries: Vec<&Override> = self.live_entries(&text, now_ms).collect();
            // The whole-set replacement first, then the one-limit overrides on top of it.
            let ordered = entries
                .iter()
                .filter(|entry| entry.limit.is_none())
                .chain(entries.iter().filter(|entry| entry.limit.is_some()));
            for entry in ordered {
                let rule = Rule::Override {
                    pattern: pattern.clone(),
                    expires_at_ms: entry.expires_at_ms,
                };
                if entry.limit.is_none() {
                    limits.clear();
                }
                for spec in &entry.limits {
                    let effective = Effective {
                        spec: spec.clone(),
                        rule: rule.clone(),
                    };
                    match limits
                        .iter_mut()
                        .find(|limit| limit.spec.name() == spec.name())
                    {
                        Some(slot) => *slot = effective,
                        None => limits.push(effective),
                    }
                }
            }
        }
        limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> LimitSpec {
        LimitSpec::parse(text).unwrap()
    }

    fn entry(
        pattern: &str,
        limit: Option<&str>,
        limits: &[&str],
        expires: Option<u64>,
    ) -> Override {
        Override {
            pattern: Pattern::parse(pattern).unwrap(),
            limit: limit.map(String::from),
            limits: limits.iter().map(|text| spec(text)).collect(),
            expires_at_ms: expires,
        }
    }

    fn store(overrides: Vec<Override>) -> Snapshot {
        let mut snapshot = Snapshot::default();
        snapshot.plans.insert(
            "pro".into(),
            vec![
                spec("per-minute=sliding:1000/60s"),
                spec("per-day=fixed:100000/1d"),
            ],
        );
        snapshot.tenants.insert("acme-eu".into(), "pro".into());
        snapshot.tenants.insert("acme".into(), "pro".into());
        for entry in overrides {
            snapshot.overrides.insert(entry.field(), entry);
        }
        snapshot
    }

    fn texts(effective: &[Effective]) -> Vec<String> {
        effective
            .iter()
            .map(|limit| format!("{} <- {}", limit.spec, limit.rule))
            .collect()
    }

    #[test]
    fn exact_beats_the_longest_wildcard_beats_the_plan_beats_the_default() {
        let defaults = [spec("per-minute=sliding:10/60s")];
        let snapshot = store(vec![
            entry(
                "acme-*",
                Some("per-minute"),
                &["per-minute=sliding:2000/60s"],
                None,
            ),
            entry(
                "acme-e*",
                Some("per-minute"),
                &["per-minute=sliding:3000/60s"],
                None,
            ),
            entry("*", Some("per-day"), &["per-day=fixed:5/1d"], None),
            entry("acme-eu", Some("per-day"), &["per-day=fixed:7/1d"], None),
        ]);
        assert_eq!(
            texts(&snapshot.resolve("acme-eu", &defaults, 0)),
            [
                "per-minute=sliding:3000/1m <- wildcard override 'acme-e*'",
                "per-day=fixed:7/1d <- override 'acme-eu'",
            ]
        );
        // acme has the plan; only '*' matches (acme-* needs the dash).
        assert_eq!(
            texts(&snapshot.resolve("acme", &defaults, 0)),
            [
                "per-minute=sliding:1000/1m <- plan pro",
                "per-day=fixed:5/1d <- wildcard override '*'",
            ]
        );
        // No plan: the defaults, then the '*' override adds its limit.
        assert_eq!(
            texts(&snapshot.resolve("zeta", &defaults, 0)),
            [
                "per-minute=sliding:10/1m <- policy default",
                "per-day=fixed:5/1d <- wildcard override '*'",
            ]
        );
    }

    #[test]
    fn an_all_override_replaces_the_set_and_expiry_restores_the_plan() {
        let snapshot = store(vec![entry(
            "acme",
            None,
            &["only=token:50/1s"],
            Some(1_000),
        )]);
        assert_eq!(
            texts(&snapshot.resolve("acme", &[], 999)),
            ["only=token:50/1s <- override 'acme' until 1000 ms"]
        );
        assert_eq!(
            texts(&snapshot.resolve("acme", &[], 1_000)),
            [
                "per-minute=sliding:1000/1m <- plan pro",
                "per-day=fixed:100000/1d <- plan pro",
            ]
        );
    }

    /// The rule written the obvious way: scan every override.
    fn reference(snapshot: &Snapshot, tenant: &str, now_ms: u64) -> Vec<(String, String)> {
        let mut limits: Vec<(String, String)> = snapshot
            .tenants
            .get(tenant)
            .and_then(|plan| snapshot.plans.get(plan))
            .map(|specs| {
                specs
                    .iter()
                    .map(|s| (s.name().to_string(), s.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let live: Vec<&Override> = snapshot
            .overrides
            .values()
            .filter(|e| e.live(now_ms) && e.pattern.matches(tenant))
            .collect();
        let longest = live
            .iter()
            .filter_map(|e| match &e.pattern {
                Pattern::Prefix(prefix) => Some(prefix.len()),
                Pattern::Exact(_) => None,
            })
            .max();
        let wildcard =
            |e: &&&Override| matches!(&e.pattern, Pattern::Prefix(p) if Some(p.len()) == longest);
        let exact = |e: &&&Override| matches!(&e.pattern, Pattern::Exact(_));
        for layer in [
            live.iter().filter(wildcard).collect::<Vec<_>>(),
            live.iter().filter(exact).collect(),
        ] {
            for all in [true, false] {
                for entry in layer.iter().filter(|e| e.limit.is_none() == all) {
                    if all {
                        limits.clear();
                    }
                    for spec in &entry.limits {
                        let value = (spec.name().to_string(), spec.to_string());
                        match limits.iter_mut().find(|(name, _)| name == spec.name()) {
                            Some(slot) => *slot = value,
                            None => limits.push(value),
                        }
                    }
                }
            }
        }
        limits
    }

    proptest::proptest! {
        #[test]
        fn the_indexed_rule_is_the_obvious_one(
            entries in proptest::collection::vec(
                ("[ab-]{0,3}", proptest::bool::ANY, 0u8..3, 1u64..5, proptest::option::of(0u64..4)),
                0..12,
            ),
            tenant in "[ab-]{1,4}",
            now_ms in 0u64..4,
        ) {
            let mut snapshot = store(Vec::new());
            snapshot.tenants.insert(tenant.clone(), "pro".into());
            for (prefix, wildcard, name, amount, expires) in entries {
                let pattern = if wildcard { format!("{prefix}*") } else if prefix.is_empty() { continue } else { prefix };
                let names = ["per-minute", "per-day", "extra"];
                let limit = names[usize::from(name)];
                let all = name == 2;
                let text = format!("{limit}=fixed:{amount}/1d");
                let entry = entry(&pattern, (!all).then_some(limit), &[&text], expires);
                snapshot.overrides.insert(entry.field(), entry);
            }
            let resolved: Vec<(String, String)> = snapshot
                .resolve(&tenant, &[], now_ms)
                .into_iter()
                .map(|e| (e.spec.name().to_string(), e.spec.to_string()))
                .collect();
            proptest::prop_assert_eq!(resolved, reference(&snapshot, &tenant, now_ms));
        }
    }

    #[test]
    fn a_value_the_store_refuses_is_no_tenant() {
        let snapshot = store(vec![
            entry(
                "acme",
                Some("per-minute"),
                &["per-minute=sliding:5000/60s"],
                None,
            ),
            entry("*", Some("per-day"), &["per-day=fixed:5/1d"], None),
        ]);
        let defaults = [spec("per-minute=sliding:10/60s")];
        // `acme per-minute` spells the field of acme's one-limit override.
        assert_eq!(
            texts(&snapshot.resolve("acme per-minute", &defaults, 0)),
            [
                "per-minute=sliding:10/1m <- policy default",
                "per-day=fixed:5/1d <- wildcard override '*'",
            ]
        );
    }

    #[test]
    fn an_unreadable_field_is_listed_not_fatal() {
        let snapshot = Snapshot::decode(
            4,
            vec![
                ("ok".into(), "a=fixed:1/1s".into()),
                ("bad".into(), "a=leaky:1/1s".into()),
            ],
            vec![("t".into(), "bad".into())],
            vec![("t a".into(), "nonsense".into())],
        );
        assert_eq!(snapshot.plans.len(), 1);
        let fields: Vec<(Table, &str)> = snapshot
            .unreadable
            .iter()
            .map(|bad| (bad.table, bad.field.as_str()))
            .collect();
        assert_eq!(fields, [(Table::Plans, "bad"), (Table::Overrides, "t a")]);
        assert!(snapshot.unreadable_field(Table::Plans, "bad").is_some());
    }

    #[test]
    fn overrides_round_trip_through_their_encoding() {
        let original = entry(
            "acme-*",
            Some("per-minute"),
            &["per-minute=sliding:5/60s"],
            Some(42),
        );
        let decoded = Override::decode(&original.field(), &original.encode_value()).unwrap();
        assert_eq!(decoded, original);
        assert!(Override::decode("acme per-day", "per-minute=sliding:5/60s").is_err());
        assert!(Override::decode("acme", "").is_err());
    }
}
