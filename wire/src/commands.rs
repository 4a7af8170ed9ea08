//! Every command of the module, declared once.
//!
//! The `commands!` table below holds what everything that names a command reads: the module
//! registers each one with its name, arity and flags (and counts its decisions under its name,
//! which is also the keyspace event of its writes); the Functions library implements it as
//! the function named here, which the client calls on servers without the module; the
//! encoder ([`crate::encode`]) writes its arguments in its [`Syntax`], and routes a call of a
//! kind that has no command of its own through `RL.MULTI`.

use std::ffi::CStr;

use redis_ratelimit_core::kinds::Kind;

/// How a command's arguments are laid out after its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// `key <parameters of the kind> [cost] [PARTIAL [MIN m]] [MAXWAIT ms]`: a call of one
    /// algorithm, the kind's own command.
    Call(Kind),
    /// `key max_burst count period [quantity]` (redis-cell's `CL.THROTTLE`).
    Throttle,
    /// `numkeys key [key ...] limit [limit ...] [COST c] [WEIGHTS w ...] [HOLDER id]
    /// [PARTIAL [MIN m]]`.
    Multi,
    /// `key limit holder ttl_ms`.
    Acquire,
    /// `key holder`.
    Release,
    /// `key ALGORITHM <parameters> [cost] [PARTIAL [MIN m]]`.
    Peek,
    /// `key ALGORITHM <parameters> [cost]`.
    Refund,
    /// `key effect [key effect ...]`: effects computed by a primary (internal).
    Effects,
    /// `floor_key lease_key ALGORITHM <parameters> [cost]`: a region's admission, the floor
    /// then the leased balance.
    Regional,
    /// `key units expires_at_ms`: installs a region's lease.
    RegionLease,
}

/// Declares every command once: its name (lowercase, as Redis registers and reports it), its
/// Redis arity (the argument count with the name; negative: at least), its flags, its syntax,
/// whether `INFO ratelimit` counts its decisions (under the name after the dot, with the name
/// as the keyspace event of its writes), and the Functions library's function for it.
macro_rules! commands {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $arity:literal, $flags:literal,
       $syntax:expr, $counted:literal, $function:expr;)*) => {
        /// A command of the module.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Command {
            $($(#[$doc])* $variant,)*
        }

        impl Command {
            /// Every command, in registration (and `INFO`) order.
            pub const ALL: &[Command] = &[$(Command::$variant),*];

            /// The name, lowercase (`rl.tokenbucket`), as Redis registers it.
            pub const fn name(self) -> &'static CStr {
                match self { $(Command::$variant => $name,)* }
            }

            /// Redis's arity: the argument count with the name; negative means "at least".
            pub const fn arity(self) -> i32 {
                match self { $(Command::$variant => $arity,)* }
            }

            /// The command flags Redis registers it with.
            pub const fn flags(self) -> &'static CStr {
                match self { $(Command::$variant => $flags,)* }
            }

            /// How its arguments are laid out.
            pub const fn syntax(self) -> Syntax {
                match self { $(Command::$variant => $syntax,)* }
            }

            /// Whether `INFO ratelimit` counts its decisions (see [`Command::stats_name`]).
            pub const fn counted(self) -> bool {
                match self { $(Command::$variant => $counted,)* }
            }

            /// The Functions library's function for it (`rl_tokenbucket`), if any.
            pub const fn function(self) -> Option<&'static str> {
                match self { $(Command::$variant => $function,)* }
            }
        }
    };
}

commands! {
    /// `RL.TOKENBUCKET`.
    TokenBucket = c"rl.tokenbucket", -4, c"write deny-oom fast",
        Syntax::Call(Kind::TokenBucket), true, Some("rl_tokenbucket");
    /// `RL.SLIDING`.
    Sliding = c"rl.sliding", -4, c"write deny-oom fast",
        Syntax::Call(Kind::SlidingWindow), true, Some("rl_sliding");
    /// `RL.FIXED`.
    Fixed = c"rl.fixed", -4, c"write deny-oom fast",
        Syntax::Call(Kind::FixedWindow), true, Some("rl_fixed");
    /// `RL.SLIDINGLOG`.
    SlidingLog = c"rl.slidinglog", -4, c"write deny-oom",
        Syntax::Call(Kind::SlidingLog), true, Some("rl_slidinglog");
    /// `CL.THROTTLE`.
    Throttle = c"cl.throttle", -5, c"write deny-oom fast",
        Syntax::Throttle, true, Some("cl_throttle");
    /// `RL.MULTI`: counts calls every limit admitted, or that one denied.
    Multi = c"rl.multi", -6, c"write deny-oom getkeys-api",
        Syntax::Multi, true, Some("rl_multi");
    /// `RL.ACQUIRE`.
    Acquire = c"rl.acquire", 5, c"write deny-oom",
        Syntax::Acquire, true, Some("rl_acquire");
    /// `RL.RELEASE`: counts as admitted a release of a live holder.
    Release = c"rl.release", 3, c"write",
        Syntax::Release, true, Some("rl_release");
    /// `RL.PEEK`: counts the calls that would have been admitted or denied.
    Peek = c"rl.peek", -4, c"readonly fast",
        Syntax::Peek, true, Some("rl_peek");
    /// `RL.REFUND`: counts as admitted a refund that gave something back.
    Refund = c"rl.refund", -5, c"write fast",
        Syntax::Refund, true, Some("rl_refund");
    /// `RL.REGIONAL`: counts the calls the floor or the lease admitted, or that both denied.
    Regional = c"rl.regional", -6, c"write deny-oom",
        Syntax::Regional, true, Some("rl_regional");
    /// `RL.REGIONLEASE`: counts every lease installed as admitted.
    RegionLease = c"rl.regionlease", 4, c"write deny-oom",
        Syntax::RegionLease, true, Some("rl_regionlease");
    /// `RL.FX`: applies a primary's effects (replication and AOF only).
    Effects = c"rl.fx", -3, c"write deny-oom",
        Syntax::Effects, false, None;
    /// `RL.SETSTATE`: `RL.FX` under its earlier name (AOF files and primaries of earlier
    /// versions).
    LegacyEffects = c"rl.setstate", -3, c"write deny-oom",
        Syntax::Effects, false, None;
}

impl Command {
    /// The name counted decisions are reported under in `INFO` (`tokenbucket` →
    /// `ratelimit_tokenbucket_admitted`): the name after its dot.
    pub fn stats_name(self) -> &'static str {
        let name = self.name().to_str().unwrap_or_default();
        name.split_once('.').map_or(name, |(_, after)| after)
    }

    /// The keyspace event of a counted command's writes: its name.
    pub const fn event(self) -> Option<&'static CStr> {
        if self.counted() {
            Some(self.name())
        } else {
            None
        }
    }

    /// The command a name stands for (case-insensitive), if any.
    pub fn named(name: &[u8]) -> Option<Command> {
        Command::ALL
            .iter()
            .copied()
            .find(|command| name.eq_ignore_ascii_case(command.name().to_bytes()))
    }

    /// The command of `kind`'s own (`RL.TOKENBUCKET` for a token bucket), if it has one: a
    /// call of a kind without one goes through `RL.MULTI`.
    pub fn calling(kind: Kind) -> Option<Command> {
        Command::ALL
            .iter()
            .copied()
            .find(|command| command.syntax() == Syntax::Call(kind))
    }

    /// Whether its keys come counted (`numkeys key ...`) rather than one key first.
    pub const fn counts_keys(self) -> bool {
        matches!(self.syntax(), Syntax::Multi)
    }

    /// How many keys come first when they are not counted: two for `RL.REGIONAL`
    /// (`floor_key lease_key`), one for every other command (the Functions library's
    /// `FCALL` form declares exactly these).
    pub const fn leading_keys(self) -> usize {
        match self.syntax() {
            Syntax::Regional => 2,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_found_in_any_case() {
        for command in Command::ALL.iter().copied() {
            let upper = command.name().to_bytes().to_ascii_uppercase();
            assert_eq!(Command::named(&upper), Some(command));
            let same = Command::ALL.iter().filter(|c| c.name() == command.name());
            assert_eq!(same.count(), 1);
        }
        assert_eq!(Command::named(b"RL.NOPE"), None);
        assert_eq!(Command::named(b"rl.multi"), Some(Command::Multi));
    }

    #[test]
    fn a_commands_position_is_its_discriminant() {
        for (index, command) in Command::ALL.iter().enumerate() {
            assert_eq!(*command as usize, index, "{command:?}");
        }
    }

    #[test]
    fn kinds_with_their_own_command() {
        assert_eq!(
            Command::calling(Kind::TokenBucket),
            Some(Command::TokenBucket)
        );
        assert_eq!(
            Command::calling(Kind::SlidingLog),
            Some(Command::SlidingLog)
        );
        // Other syntaxes: reached through RL.MULTI as a single call.
        assert_eq!(Command::calling(Kind::Gcra), None);
        assert_eq!(Command::calling(Kind::Concurrency), None);
    }

    #[test]
    fn stats_are_named_after_the_command() {
        let counted: Vec<&str> = Command::ALL
            .iter()
            .filter(|c| c.counted())
            .map(|c| c.stats_name())
            .collect();
        assert_eq!(
            counted,
            [
                "tokenbucket",
                "sliding",
                "fixed",
                "slidinglog",
                "throttle",
                "multi",
                "acquire",
                "release",
                "peek",
                "refund",
                "regional",
                "regionlease"
            ]
        );
        assert_eq!(Command::Effects.event(), None);
        assert_eq!(Command::Fixed.event(), Some(c"rl.fixed"));
    }
}
