//! A region's lease agent: one quota across regions (`docs/regions.md`).
//!
//! Each region's clients call `RL.REGIONAL floor_key lease_key ...` on their own Redis: the
//! floor first, then the leased balance. The agent keeps those balances topped up from the
//! home region's pool: every period `P` it asks home, in **one pipelined call**, for a
//! `PARTIAL` grant of up to `k` units of each hot limit's pool key, ends the batch with
//! `WAIT n` on the home primary (a grant counts only once a replica has it, so a failover
//! to a replica that acknowledged loses none: with more than one replica, chain them, or a
//! promotion of the one that did not acknowledge loses grants; see `docs/regions.md`), and
//! installs what was granted with `RL.REGIONLEASE` in the region,
//! each lease ending `T = P + a` after the request was **sent** (read on the region's own
//! clock before the grants exist, derated for drift), so no lease outlives `T` in home time.
//! A window pool's lease (fixed or sliding window) also ends no later than the home window
//! it was granted in: the batch opens with home's `TIME`, and the lease lives at most what
//! was left of that window then, counted from the sending (see `lease_end_ms`).
//!
//! An in-flight pool's slots are leased as holders of the pool: `k` acquires
//! (`RL.ACQUIRE pool_key limit <slot_holder>:<i> T_ms`, `i` in `0..k`) in the same batch, the
//! lease's units the slots acquired. The holder ids are the region's and the slot's index, so
//! the next refresh renews them rather than taking more; they lapse at home `T` after the
//! last grant (no give-back). The region gives a leased slot only to a call whose holder ends
//! by the lease's end (`RL.REGIONAL ... CONCURRENCY`), so every call on a leased slot ends
//! while its pool holder lives.
//!
//! A lease replaces the previous one; the unspent units of the previous one lapse (the exact
//! mode: give-backs cost exactness, see `docs/regions.md`). A batch whose `WAIT` did not
//! reach its replicas is installed not at all: its grants may not survive a failover, so the
//! agent counts them as not granted (safe: units are lost, never doubled).
//!
//! `config` holds the hot limits and the agent's settings, `grants` the batch asked of home
//! and its replies, `lease` a lease's end and the installs in the region, `agent` one
//! refresh and the task repeating it, `error` why a refresh installed nothing.

mod agent;
mod config;
mod error;
mod grants;
mod lease;

pub use self::agent::{Refresh, refresh, run};
pub use self::config::{AgentConfig, HotLimit, LogLeases, ServerForm};
pub use self::error::AgentError;
