//! The kinds of limiter one `ratelimit` key can hold, declared once.
//!
//! Every per-kind fact lives in the `kinds!` table below, and everything that has to know
//! the kinds is generated from it:
//!
//! - [`Kind`]: the tag of a stored limiter (also its byte in the encoding);
//! - [`Limiter`], [`LimiterRef`], [`LimiterMut`]: a stored state of any kind, owned or
//!   borrowed;
//! - [`Quota`]: the algorithm and validated parameters a call checks a key against;
//! - [`Change`]: what an admitted call does to a key of any kind;
//! - the dispatch from a [`Quota`] and the key's state to the algorithm's pure functions,
//!   which refuses a key holding another kind.
//!
//! The module and the client work only with these type-erased forms, so one engine
//! ([`crate::engine`]) serves every algorithm and a multi-limit call can mix them. This is the
//! only registry of algorithms: adding one is a line in the table, then its encoding and
//! its arguments in the `redis-ratelimit-wire` crate (the compiler lists what is missing).

use crate::concurrency::{Concurrency, ConcurrencyAlgorithm, ConcurrencyChange, ConcurrencyParams};
use crate::facts::{QuotaFacts, Recovery};
use crate::fixed_window::{FixedWindow, FixedWindowAlgorithm};
use crate::gcra::{Gcra, GcraAlgorithm, GcraParams};
use crate::grant::{self, Grant, Granted};
use crate::sliding_log::{SlidingLog, SlidingLogAlgorithm, SlidingLogChange, SlidingLogParams};
use crate::sliding_window::{SlidingWindow, SlidingWindowAlgorithm};
use crate::token_bucket::{TokenBucket, TokenBucketAlgorithm, TokenBucketParams};
use crate::window::WindowParams;
use crate::{Algorithm, CallCost, Evaluation};
use std::time::Duration;

/// A state type stored under one [`Kind`].
pub trait KindState: Sized + Clone + 'static {
    /// The kind tag of keys holding this state.
    const KIND: Kind;
    /// Borrows the state as a limiter of its kind.
    fn as_limiter(&self) -> LimiterRef<'_>;
    /// Mutably borrows the state as a limiter of its kind.
    fn as_limiter_mut(&mut self) -> LimiterMut<'_>;
    /// Wraps the state as a limiter of its kind.
    fn into_limiter(self) -> Limiter;
}

/// The algorithm of one kind: its changes convert to the type-erased [`Change`] (for code
/// generic over algorithms, such as tests and fuzz targets, that encodes their effects).
pub trait KindAlgorithm: Algorithm<State: KindState> {
    /// Wraps a change of this algorithm.
    fn erase(change: Self::Change) -> Change;
    /// Borrows a change of this algorithm as a type-erased one (for encoding it where the
    /// algorithm is known statically, without moving it into a [`Change`]).
    fn erase_ref(change: &Self::Change) -> ChangeRef<'_>;
}

/// Something done with a quota's algorithm and parameters, statically typed (see
/// [`Quota::visit`]): lets a caller dispatch on the kind once, then run code monomorphised
/// for it.
pub trait QuotaVisitor {
    /// What the visit produces.
    type Output;
    /// Called with the quota's algorithm and parameters.
    fn visit<A: KindAlgorithm>(self, params: &A::Params) -> Self::Output;
}

/// A value held either inline or boxed in the type-erased enums, borrowed as itself.
pub trait Inner<T> {
    /// The value.
    fn inner(&self) -> &T;
}

impl<T> Inner<T> for T {
    fn inner(&self) -> &T {
        self
    }
}

impl<T> Inner<T> for Box<T> {
    fn inner(&self) -> &T {
        self
    }
}

/// A value held either inline or boxed in the type-erased enums, taken out as itself.
pub trait Unbox<T> {
    /// The value.
    fn unbox(self) -> T;
}

impl<T> Unbox<T> for T {
    fn unbox(self) -> T {
        self
    }
}

impl<T> Unbox<T> for Box<T> {
    fn unbox(self) -> T {
        *self
    }
}

/// Something done with the state type of a kind (see [`Kind::visit_type`]): lets the value
/// layer box, borrow and free states without code per kind.
pub trait TypeVisitor {
    /// What the visit produces.
    type Output;
    /// Called with the kind's state type.
    fn visit<S: KindState>(self) -> Self::Output;
}

/// Something done with an owned state of a statically known type (see [`Limiter::visit`]).
pub trait StateVisitor {
    /// What the visit produces.
    type Output;
    /// Called with the limiter's state.
    fn visit<S: KindState>(self, state: S) -> Self::Output;
}

/// Declares every kind once: its discriminant (the encoding's kind byte), its algorithm, its
/// state type and how the type-erased [`Quota`] and [`Change`] hold its parameters and
/// change (the algorithm's own types, or boxed when they are large), how errors name it, the
/// ALGORITHM name `RL.PEEK` / `RL.REFUND` / `RL.MULTI` accept (none for kinds with a command
/// of their own syntax), the name configuration files give it, its short name (the
/// policy store's limit texts and keys, and an alias of the configuration name), and the tag
/// the Functions library (`functions/ratelimit.lua`) stores and names it by.
macro_rules! kinds {
    ($($variant:ident = $byte:literal: $algorithm:ty [$state:ty, $params:ty, $change:ty], $description:literal, $name:expr, $config_name:literal, $short_name:literal, $library_tag:literal;)*) => {
        /// The algorithm a key holds. The discriminant is the kind byte of the encoding (and
        /// the order kinds sort in).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Kind {
            $(
                #[doc = concat!("A key holding ", $description, ".")]
                $variant = $byte,
            )*
        }

        impl Kind {
            /// All kinds, in discriminant order.
            pub const ALL: &[Kind] = &[$(Kind::$variant),*];

            /// The alignment of each kind's state, in discriminant order (the value layer
            /// keeps the kind in the low bits of a state's address).
            pub const STATE_ALIGNMENTS: &[usize] =
                &[$(align_of::<$state>()),*];

            /// How error messages name this kind ("key holds a token bucket").
            pub fn describe(self) -> &'static str {
                match self { $(Kind::$variant => $description,)* }
            }

            /// The ALGORITHM name commands accept for this kind, if any.
            pub fn command_name(self) -> Option<&'static str> {
                match self { $(Kind::$variant => $name,)* }
            }

            /// The name configuration files give this kind (`token_bucket`).
            pub fn config_name(self) -> &'static str {
                match self { $(Kind::$variant => $config_name,)* }
            }

            /// This kind's short name (`token`): how the policy store's limit texts and keys
            /// write it, and an alias of [`config_name`](Self::config_name).
            pub fn short_name(self) -> &'static str {
                match self { $(Kind::$variant => $short_name,)* }
            }

            /// The tag the Functions library (`functions/ratelimit.lua`) gives this kind: the
            /// first word of the string a key of it holds there (`tb`), a persisted format;
            /// its tables of kinds are generated from this one (`make generate`).
            pub fn library_tag(self) -> &'static str {
                match self { $(Kind::$variant => $library_tag,)* }
            }

            /// Calls `visitor` with this kind's state type.
            pub fn visit_type<V: TypeVisitor>(self, visitor: V) -> V::Output {
                match self { $(Kind::$variant => visitor.visit::<$state>(),)* }
            }
        }

        /// An owned limiter of any kind.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Limiter {
            $(
                #[doc = concat!("A key holding ", $description, ".")]
                $variant($state),
            )*
        }

        /// A borrowed limiter of any kind.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum LimiterRef<'a> {
            $(
                #[doc = concat!("A key holding ", $description, ".")]
                $variant(&'a $state),
            )*
        }

        /// A mutably borrowed limiter of any kind.
        #[derive(Debug)]
        pub enum LimiterMut<'a> {
            $(
                #[doc = concat!("A key holding ", $description, ".")]
                $variant(&'a mut $state),
            )*
        }

        /// The algorithm and validated parameters one call checks a key against (hashed
        /// field by field: a stable value to tell two limits on the same keys apart).
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum Quota {
            $(
                #[doc = concat!("Checked against ", $description, ".")]
                $variant($params),
            )*
        }

        /// What an admitted call does to a key of any kind.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Change {
            $(
                #[doc = concat!("A change to ", $description, ".")]
                $variant($change),
            )*
        }

        /// A borrowed [`Change`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum ChangeRef<'a> {
            $(
                #[doc = concat!("A change to ", $description, ".")]
                $variant(&'a <$algorithm as Algorithm>::Change),
            )*
        }

        impl Limiter {
            /// Borrows the limiter.
            pub fn as_ref(&self) -> LimiterRef<'_> {
                match self { $(Limiter::$variant(state) => LimiterRef::$variant(state),)* }
            }

            /// Mutably borrows the limiter.
            pub fn as_mut(&mut self) -> LimiterMut<'_> {
                match self { $(Limiter::$variant(state) => LimiterMut::$variant(state),)* }
            }

            /// Overwrites a limiter of the same kind; hands this one back for another kind.
            pub fn store_into(self, target: LimiterMut<'_>) -> Result<(), Limiter> {
                match (self, target) {
                    $((Limiter::$variant(state), LimiterMut::$variant(slot)) => {
                        *slot = state;
                        Ok(())
                    })*
                    #[allow(unreachable_patterns)]
                    (limiter, _) => Err(limiter),
                }
            }

            /// Calls `visitor` with the state, statically typed.
            pub fn visit<V: StateVisitor>(self, visitor: V) -> V::Output {
                match self { $(Limiter::$variant(state) => visitor.visit(state),)* }
            }
        }

        impl LimiterRef<'_> {
            /// The kind of this limiter.
            pub fn kind(self) -> Kind {
                match self { $(LimiterRef::$variant(_) => Kind::$variant,)* }
            }

            /// Bytes of the state itself, without what it may own on the heap.
            fn inline_bytes(self) -> usize {
                match self { $(LimiterRef::$variant(_) => size_of::<$state>(),)* }
            }

            /// A deep copy (for `COPY`).
            pub fn to_owned(self) -> Limiter {
                match self { $(LimiterRef::$variant(state) => Limiter::$variant(state.clone()),)* }
            }
        }

        impl Quota {
            /// The kind of limiter this quota keeps.
            pub fn kind(&self) -> Kind {
                match self { $(Quota::$variant(_) => Kind::$variant,)* }
            }

            /// Units the call asks for.
            pub fn cost(&self) -> u64 {
                match self { $(Quota::$variant(params) => params.cost(),)* }
            }

            /// The quota advertised for this limit (see [`QuotaFacts::advertised_quota`]).
            pub fn advertised_quota(&self) -> u64 {
                match self { $(Quota::$variant(params) => params.advertised_quota(),)* }
            }

            /// The window the advertised quota applies to (see [`QuotaFacts::window`]).
            pub fn window(&self) -> Duration {
                match self { $(Quota::$variant(params) => params.window(),)* }
            }

            /// How the units a call takes come back (see [`Algorithm::recovery`]).
            pub fn recovery(&self) -> Recovery {
                match self {
                    $(Quota::$variant(params) => <$algorithm>::recovery(
                        <$params as Inner<<$algorithm as Algorithm>::Params>>::inner(params),
                    ),)*
                }
            }

            /// What one of `replicas` replicas enforces alone (see [`QuotaFacts::share`]).
            pub fn share(&self, replicas: u64) -> Option<Quota> {
                match self {
                    $(Quota::$variant(params) => params.share(replicas).map(|share| Quota::$variant(share.into())),)*
                }
            }

            /// The same quota for a call of `cost` units.
            #[must_use]
            pub fn with_cost(&self, cost: u64) -> Quota {
                match self { $(Quota::$variant(params) => Quota::$variant(params.with_cost(cost).into()),)* }
            }

            /// Evaluates a call under `grant` against the key's limiter (`None`: missing), at
            /// `now_us`; `Err` names the kind the key holds when it is not this quota's.
            pub fn evaluate(
                &self,
                held: Option<LimiterRef<'_>>,
                grant: Grant,
                now_us: i64,
            ) -> Result<Granted<Change>, Kind> {
                match (self, held) {
                    $(
                        (Quota::$variant(params), None) =>
                            Ok(grant::evaluate::<$algorithm>(None, params, grant, now_us)
                                .map_change(|change| Change::$variant(change.into()))),
                        (Quota::$variant(params), Some(LimiterRef::$variant(state))) =>
                            Ok(grant::evaluate::<$algorithm>(Some(state), params, grant, now_us)
                                .map_change(|change| Change::$variant(change.into()))),
                    )*
                    (_, Some(other)) => Err(other.kind()),
                }
            }

            /// Gives the call's cost back to the key's limiter (see [`Algorithm::refund`]).
            pub fn refund(
                &self,
                held: Option<LimiterRef<'_>>,
                now_us: i64,
            ) -> Result<Evaluation<Change>, Kind> {
                match (self, held) {
                    $(
                        (Quota::$variant(params), None) =>
                            Ok(<$algorithm>::refund(None, params, now_us).map_change(|change| Change::$variant(change.into()))),
                        (Quota::$variant(params), Some(LimiterRef::$variant(state))) =>
                            Ok(<$algorithm>::refund(Some(state), params, now_us)
                                .map_change(|change| Change::$variant(change.into()))),
                    )*
                    (_, Some(other)) => Err(other.kind()),
                }
            }

            /// The most units, up to `up_to`, a call could take now from the key's limiter
            /// (see [`Algorithm::grantable`]).
            pub fn grantable(
                &self,
                held: Option<LimiterRef<'_>>,
                up_to: u64,
                now_us: i64,
            ) -> Result<u64, Kind> {
                match (self, held) {
                    $(
                        (Quota::$variant(params), None) =>
                            Ok(<$algorithm>::grantable(None, params, up_to, now_us)),
                        (Quota::$variant(params), Some(LimiterRef::$variant(state))) =>
                            Ok(<$algorithm>::grantable(Some(state), params, up_to, now_us)),
                    )*
                    (_, Some(other)) => Err(other.kind()),
                }
            }
        }

        impl Quota {
            /// Calls `visitor` with the quota's algorithm and parameters.
            pub fn visit<V: QuotaVisitor>(&self, visitor: V) -> V::Output {
                match self {
                    $(Quota::$variant(params) => visitor.visit::<$algorithm>(
                        <$params as Inner<<$algorithm as Algorithm>::Params>>::inner(params),
                    ),)*
                }
            }
        }

        impl Change {
            /// The kind of limiter this change applies to.
            pub fn kind(&self) -> Kind {
                match self { $(Change::$variant(_) => Kind::$variant,)* }
            }

            /// Borrows the change.
            pub fn as_ref(&self) -> ChangeRef<'_> {
                match self {
                    $(Change::$variant(change) => ChangeRef::$variant(
                        <$change as Inner<<$algorithm as Algorithm>::Change>>::inner(change),
                    ),)*
                }
            }

            /// The limiter of a key that did not exist yet, once this change is applied.
            pub fn create(self) -> Limiter {
                match self { $(Change::$variant(change) => Limiter::$variant(<$algorithm>::create(change.unbox())),)* }
            }

            /// Applies the change to a limiter of its kind; refuses another kind, naming its own.
            pub fn apply(self, limiter: LimiterMut<'_>) -> Result<(), Kind> {
                match (self, limiter) {
                    $(
                        (Change::$variant(change), LimiterMut::$variant(state)) => {
                            <$algorithm>::apply(state, change.unbox());
                            Ok(())
                        }
                    )*
                    #[allow(unreachable_patterns)]
                    (change, _) => Err(change.kind()),
                }
            }
        }

        $(
            impl KindAlgorithm for $algorithm {
                fn erase(change: Self::Change) -> Change {
                    Change::$variant(change.into())
                }
                fn erase_ref(change: &Self::Change) -> ChangeRef<'_> {
                    ChangeRef::$variant(change)
                }
            }

            impl KindState for $state {
                const KIND: Kind = Kind::$variant;
                fn as_limiter(&self) -> LimiterRef<'_> {
                    LimiterRef::$variant(self)
                }
                fn as_limiter_mut(&mut self) -> LimiterMut<'_> {
                    LimiterMut::$variant(self)
                }
                fn into_limiter(self) -> Limiter {
                    Limiter::$variant(self)
                }
            }
        )*
    };
}

kinds! {
    TokenBucket = 0: TokenBucketAlgorithm [TokenBucket, TokenBucketParams, TokenBucket],
        "a token bucket", Some("TOKENBUCKET"), "token_bucket", "token", "tb";
    SlidingWindow = 1: SlidingWindowAlgorithm [SlidingWindow, WindowParams, SlidingWindow],
        "a sliding window", Some("SLIDING"), "sliding_window", "sliding", "sw";
    FixedWindow = 2: FixedWindowAlgorithm [FixedWindow, WindowParams, FixedWindow],
        "a fixed window", Some("FIXED"), "fixed_window", "fixed", "fw";
    SlidingLog = 3: SlidingLogAlgorithm [SlidingLog, SlidingLogParams, SlidingLogChange],
        "a sliding log", Some("SLIDINGLOG"), "sliding_log", "log", "sl";
    // Boxed in the type-erased quota: its five fields would make every kind's quota 48 bytes
    // to move around rather than 40 (an admitted RL.MULTI paid 30 instructions more).
    Gcra = 4: GcraAlgorithm [Gcra, Box<GcraParams>, Gcra],
        "a CL.THROTTLE (GCRA)", Some("GCRA"), "gcra", "gcra", "gcra";
    // Boxed in the type-erased enums: a holder id is 128 bytes inline, which would make every
    // quota and change of every kind that big to move around.
    Concurrency = 5: ConcurrencyAlgorithm
        [Concurrency, Box<ConcurrencyParams>, Box<ConcurrencyChange>],
        "an in-flight limit", Some("CONCURRENCY"), "concurrency", "concurrency", "cc";
}

impl Quota {
    /// The units a call counts against this quota's limit, for telling how many such calls
    /// are left: its cost, except for an in-flight limit, where a call takes one slot.
    pub fn counted_cost(&self) -> u64 {
        match self {
            Quota::Concurrency(_) => 1,
            other => other.cost(),
        }
    }
}

impl LimiterRef<'_> {
    /// Bytes the limiter occupies in memory, allocations it owns included (`MEMORY USAGE`).
    pub fn allocated_bytes(self) -> usize {
        match self {
            LimiterRef::SlidingLog(log) => log.allocated_bytes(),
            LimiterRef::Concurrency(holders) => holders.allocated_bytes(),
            fixed_size => fixed_size.inline_bytes(),
        }
    }

    /// Whether the limiter holds nothing a missing key would not: an in-flight limit whose
    /// last holder was released. Such a key is deleted rather than stored.
    pub fn is_vacant(self) -> bool {
        matches!(self, LimiterRef::Concurrency(holders) if holders.is_empty())
    }
}

impl Kind {
    /// The kind with this discriminant, if any.
    pub fn from_byte(byte: u8) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|kind| *kind as u8 == byte)
    }

    /// The kind a configuration file names (`token_bucket`, or its short name `token`;
    /// exact), if any.
    pub fn from_config_name(name: &str) -> Option<Kind> {
        Kind::ALL
            .iter()
            .copied()
            .find(|kind| kind.config_name() == name || kind.short_name() == name)
    }

    /// The kind an ALGORITHM argument names (case-insensitive), if any.
    pub fn named(name: &[u8]) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|kind| {
            kind.command_name()
                .is_some_and(|known| name.eq_ignore_ascii_case(known.as_bytes()))
        })
    }
}

/// `a, b or c`: names in the order given (the table's, for texts that list kinds), so a text
/// listing algorithms follows the table rather than a hand-written copy.
pub fn or_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
