//! A Redis Cluster connection that routes each keyed command by the slot map over one
//! connection per node, so that one stalled primary stalls only its own slots.
//!
//! The `redis` crate's cluster client refreshes its slot map (after a `MOVED`, which is what
//! a failover or a moved slot produces) under a lock every request waits for, and the refresh
//! asks every node, a stopped one included: with one primary stopped, the other shards'
//! checks were decided by Redis 0.0-0.6 % of the time after a move
//! (`tests/client/cluster_stall.rs`), and its response timeouts do not help (a node that
//! fails the refresh leaves the map, its slots' calls go to another node, get `MOVED`, and
//! start the next refresh). Here a call waits only for its own node: the map is refreshed
//! in the background, a `MOVED` updates the slot at once and is followed (a node that
//! answers a redirect did not run the command, so sending it on is no second write), and
//! commands without a key (`FUNCTION LOAD` to every primary, `COMMAND INFO`) still go
//! through the crate's client.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{
    Arg, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisFuture, Value,
};
use redis_ratelimit_wire::commands::Command;
use redis_ratelimit_wire::slot::key_slot;
use tokio::sync::OnceCell;
use tokio::task::JoinSet;

/// Slots in a Redis Cluster.
const SLOTS: usize = 16_384;
/// A slot the map has no node for.
const NO_NODE: u16 = u16::MAX;
/// The most nodes the map holds (a cluster has at most one per slot).
const MOST_NODES: usize = SLOTS;
/// The most redirects (`MOVED`, `ASK`) one command follows.
const MOST_REDIRECTS: usize = 3;
/// The least time between two refreshes of the map: a node that stays stalled or down
/// keeps giving reasons for one.
const REFRESH_EVERY: Duration = Duration::from_millis(500);

/// The crate's cluster client (for commands without a key) and the nodes by slot.
#[derive(Clone)]
pub(crate) struct ClusterConnection {
    all: redis::cluster_async::ClusterConnection,
    nodes: Arc<Nodes>,
}

impl ClusterConnection {
    /// Routes keyed commands over `nodes`, after a first look at the slot map (bounded by
    /// the connection timeout; without a map, calls go through `all` until a refresh makes
    /// one).
    pub(crate) async fn new(
        all: redis::cluster_async::ClusterConnection,
        nodes: Arc<Nodes>,
    ) -> Self {
        Arc::clone(&nodes).refresh().await;
        Self { all, nodes }
    }
}

impl ConnectionLike for ClusterConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let node = command_slot(cmd)
                .and_then(|slot| self.nodes.of_slot(slot).map(|node| (slot, node)));
            match node {
                Some((slot, node)) => self.nodes.send(slot, node, cmd).await,
                None => self.all.req_packed_command(cmd).await,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let node = pipeline
                .cmd_iter()
                .find_map(command_slot)
                .and_then(|slot| self.nodes.of_slot(slot).map(|node| (slot, node)));
            match node {
                Some((slot, node)) => {
                    self.nodes
                        .send_pipeline(slot, node, pipeline, offset, count)
                        .await
                }
                None => self.all.req_packed_commands(pipeline, offset, count).await,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.all.get_db()
    }
}

/// The slot of a command's first key, for the commands the store sends: the module's
/// (`RL.MULTI numkeys key...`, the others `key` first) and the scripts' and library's
/// (`EVALSHA sha numkeys key...`, `FCALL name numkeys key...`).
fn command_slot(cmd: &Cmd) -> Option<u16> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|arg| match arg {
            Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect();
    let name = args.first()?;
    let counted = |at: usize| {
        let keys: u64 = std::str::from_utf8(args.get(at)?).ok()?.parse().ok()?;
        if keys == 0 {
            None
        } else {
            args.get(at.checked_add(1)?)
        }
    };
    let key = if [
        &b"EVALSHA"[..],
        b"EVAL",
        b"EVALSHA_RO",
        b"EVAL_RO",
        b"FCALL",
        b"FCALL_RO",
    ]
    .iter()
    .any(|script| name.eq_ignore_ascii_case(script))
    {
        counted(2)?
    } else {
        let command = Command::named(name)?;
        if command.counts_keys() {
            counted(1)?
        } else {
            args.get(1)?
        }
    };
    Some(key_slot(key))
}

/// One node: its address, and its connection once made.
struct Node {
    host: String,
    port: u16,
    connection: Arc<OnceCell<ConnectionManager>>,
}

impl Node {
    fn route(&self) -> Route {
        Route {
            host: self.host.clone(),
            port: self.port,
            connection: Arc::clone(&self.connection),
        }
    }
}

/// Which node serves each slot.
struct Map {
    /// Per slot, an index into `nodes` (`NO_NODE`: unknown).
    slots: Vec<u16>,
    nodes: Vec<Node>,
}

impl Map {
    /// The index of the node at `host:port`, added if new (`None` when the map is full).
    fn index_of(&mut self, host: &str, port: u16, known: &[Node]) -> Option<u16> {
        let index = match self
            .nodes
            .iter()
            .position(|node| node.host == host && node.port == port)
        {
            Some(index) => index,
            None if self.nodes.len() < MOST_NODES => {
                // A node the map knew keeps its connection.
                let connection = known
                    .iter()
                    .find(|node| node.host == host && node.port == port)
                    .map_or_else(
                        || Arc::new(OnceCell::new()),
                        |node| Arc::clone(&node.connection),
                    );
                let index = self.nodes.len();
                self.nodes.push(Node {
                    host: host.to_string(),
                    port,
                    connection,
                });
                index
            }
            None => return None,
        };
        u16::try_from(index).ok()
    }
}

/// The cluster's nodes by slot, and a connection to each, made on first use.
pub(crate) struct Nodes {
    /// An initial node's settings (credentials, TLS, protocol), given each node's address.
    template: ConnectionInfo,
    /// The nodes the store was given, asked for the map with the known ones.
    initial: Vec<(String, u16)>,
    connect_timeout: Duration,
    map: Mutex<Map>,
    refreshing: AtomicBool,
    /// When the last refresh started.
    refreshed_at: Mutex<Option<Instant>>,
}

/// A node's connection, to send on.
#[derive(Clone)]
struct Route {
    host: String,
    port: u16,
    connection: Arc<OnceCell<ConnectionManager>>,
}

impl Nodes {
    /// The nodes of the cluster `initial` belongs to (their settings from the first).
    pub(crate) fn new(initial: &[ConnectionInfo], connect_timeout: Duration) -> Option<Self> {
        let template = initial.first()?.clone();
        let initial = initial
            .iter()
            .filter_map(|info| host_port(info.addr()))
            .collect();
        Some(Self {
            template,
            initial,
            connect_timeout,
            map: Mutex::new(Map {
                slots: vec![NO_NODE; SLOTS],
                nodes: Vec::new(),
            }),
            refreshing: AtomicBool::new(false),
            refreshed_at: Mutex::new(None),
        })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The node serving `slot`, if the map knows it.
    fn of_slot(&self, slot: u16) -> Option<Route> {
        let map = self.map();
        let index = *map.slots.get(usize::from(slot))?;
        map.nodes.get(usize::from(index)).map(Node::route)
    }

    /// The node at `host:port`, added to the map if new, and given `slot` if any.
    fn learn(&self, host: &str, port: u16, slot: Option<u16>) -> Option<Route> {
        let mut map = self.map();
        let index = map.index_of(host, port, &[])?;
        if let Some(entry) = slot.and_then(|slot| map.slots.get_mut(usize::from(slot))) {
            *entry = index;
        }
        map.nodes.get(usize::from(index)).map(Node::route)
    }

    /// A route to `host:port`: the map's node if it has one, else a connection of its own
    /// (an initial node the map does not name, asked for the map).
    fn route_to(&self, host: &str, port: u16) -> Route {
        let map = self.map();
        match map
            .nodes
            .iter()
            .find(|node| node.host == host && node.port == port)
        {
            Some(node) => node.route(),
            None => Route {
                host: host.to_string(),
                port,
                connection: Arc::new(OnceCell::new()),
            },
        }
    }

    /// The connection of `route`, made if it is not yet (one attempt, bounded by the
    /// connection timeout; the manager reconnects by itself once made).
    async fn connection(&self, route: &Route) -> Result<ConnectionManager, RedisError> {
        route
            .connection
            .get_or_try_init(|| async {
                let addr = with_host_port(self.template.addr(), &route.host, route.port)
                    .ok_or_else(|| {
                        RedisError::from((
                            ErrorKind::InvalidClientConfig,
                            "a cluster node needs a TCP address",
                        ))
                    })?;
                let client = redis::Client::open(self.template.clone().set_addr(addr))?;
                // As the store's connection to one server: no retries (a lost reply is the
                // caller's unknown outcome), no response timeout (each call has its own).
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(0)
                    .set_connection_timeout(Some(self.connect_timeout))
                    .set_response_timeout(None);
                ConnectionManager::new_with_config(client, config).await
            })
            .await
            .cloned()
    }

    /// Sends `cmd` (of `slot`) to `route`, following the redirects its node answers.
    async fn send(
        self: &Arc<Self>,
        slot: u16,
        mut route: Route,
        cmd: &Cmd,
    ) -> Result<Value, RedisError> {
        let mut unanswered = Unanswered(Some(Arc::clone(self)));
        let mut asking = false;
        let mut reply = Value::Nil;
        for _ in 0..=MOST_REDIRECTS {
            let mut connection = self.connection(&route).await?;
            reply = if asking {
                let mut pipeline = redis::pipe();
                pipeline.cmd("ASKING").add_command(cmd.clone());
                connection
                    .req_packed_commands(&pipeline, 0, 2)
                    .await?
                    .pop()
                    .unwrap_or(Value::Nil)
            } else {
                connection.req_packed_command(cmd).await?
            };
            unanswered.answered();
            let Some(next) = redirect(&reply).and_then(|to| self.follow(slot, &to)) else {
                break;
            };
            (route, asking) = next;
        }
        Ok(reply)
    }

    /// Sends `pipeline` (keyed in `slot`) to `route`; when its node answers every command
    /// with the same redirect (it ran none), sends it on.
    async fn send_pipeline(
        self: &Arc<Self>,
        slot: u16,
        mut route: Route,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> Result<Vec<Value>, RedisError> {
        let mut unanswered = Unanswered(Some(Arc::clone(self)));
        let mut asking = false;
        let mut replies = Vec::new();
        for _ in 0..=MOST_REDIRECTS {
            let mut connection = self.connection(&route).await?;
            replies = if asking {
                let mut asked = redis::pipe();
                for command in pipeline.cmd_iter() {
                    asked.cmd("ASKING").add_command(command.clone());
                }
                connection
                    .req_packed_commands(&asked, 0, asked.len())
                    .await?
                    .into_iter()
                    .skip(1)
                    .step_by(2)
                    .collect()
            } else {
                connection
                    .req_packed_commands(pipeline, offset, count)
                    .await?
            };
            unanswered.answered();
            let first = replies.first().and_then(redirect);
            let same = first.filter(|first| {
                replies
                    .iter()
                    .all(|reply| redirect(reply).as_ref() == Some(first))
            });
            let Some(next) = same.and_then(|to| self.follow(slot, &to)) else {
                break;
            };
            (route, asking) = next;
        }
        Ok(replies)
    }

    /// Where a redirect sends `slot`'s command, and whether with `ASKING`: a `MOVED`
    /// gives the slot to its node at once and refreshes the map in the background; an
    /// `ASK` is for this command only.
    fn follow(self: &Arc<Self>, slot: u16, redirect: &Redirect) -> Option<(Route, bool)> {
        if redirect.ask {
            let route = self.route_to(&redirect.host, redirect.port);
            Some((route, true))
        } else {
            let route = self.learn(&redirect.host, redirect.port, Some(slot));
            self.refresh_in_background();
            route.map(|route| (route, false))
        }
    }

    /// Starts a refresh of the map unless one is running or one started less than
    /// [`REFRESH_EVERY`] ago.
    fn refresh_in_background(self: &Arc<Self>) {
        if !self.due() {
            return;
        }
        if !self.refreshing.swap(true, Ordering::SeqCst) {
            let nodes = Arc::clone(self);
            tokio::spawn(async move {
                nodes.ask_for_the_map().await;
                nodes.refreshing.store(false, Ordering::SeqCst);
            });
        }
    }

    /// Whether a refresh may start now (and if so, notes that one does).
    fn due(&self) -> bool {
        let mut refreshed_at = self
            .refreshed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if refreshed_at.is_some_and(|at| now.saturating_duration_since(at) < REFRESH_EVERY) {
            return false;
        }
        *refreshed_at = Some(now);
        true
    }

    /// Refreshes the map now (the first look, when connecting).
    async fn refresh(self: Arc<Self>) {
        if !self.refreshing.swap(true, Ordering::SeqCst) {
            self.due();
            self.ask_for_the_map().await;
            self.refreshing.store(false, Ordering::SeqCst);
        }
    }

    /// Asks every known node (and the initial ones) for `CLUSTER SLOTS` at once, each
    /// bounded by the connection timeout, and takes the first answer: a stalled node
    /// delays nothing.
    async fn ask_for_the_map(self: &Arc<Self>) {
        let mut asked: Vec<(String, u16)> = {
            let map = self.map();
            map.nodes
                .iter()
                .map(|node| (node.host.clone(), node.port))
                .collect()
        };
        for node in &self.initial {
            if !asked.contains(node) {
                asked.push(node.clone());
            }
        }
        let mut answers = JoinSet::new();
        for (host, port) in asked {
            let nodes = Arc::clone(self);
            answers.spawn(async move {
                let route = nodes.route_to(&host, port);
                let bound = nodes.connect_timeout.saturating_mul(2);
                let mut slots = redis::cmd("CLUSTER");
                slots.arg("SLOTS");
                let reply = tokio::time::timeout(bound, async {
                    let mut connection = nodes.connection(&route).await.ok()?;
                    connection.req_packed_command(&slots).await.ok()
                })
                .await
                .ok()
                .flatten()?;
                parse_slots(&reply, &host)
            });
        }
        // Dropping the set when one answered stops the others.
        while let Some(answer) = answers.join_next().await {
            if let Ok(Some(ranges)) = answer {
                self.install(&ranges);
                return;
            }
        }
    }

    /// Puts the ranges of a `CLUSTER SLOTS` reply in the map: its nodes become the map's
    /// (their connections kept; a node no range names is let go).
    fn install(&self, ranges: &[(u16, u16, String, u16)]) {
        let mut map = self.map();
        let mut fresh = Map {
            slots: vec![NO_NODE; SLOTS],
            nodes: Vec::new(),
        };
        for (start, end, host, port) in ranges {
            let Some(index) = fresh.index_of(host, *port, &map.nodes) else {
                continue;
            };
            for slot in usize::from(*start)..=usize::from(*end) {
                if let Some(entry) = fresh.slots.get_mut(slot) {
                    *entry = index;
                }
            }
        }
        *map = fresh;
    }
}

/// Refreshes the map in the background when a call to a node ends without an answer: an
/// error (a refused or cut connection: the node may have been replaced), or given up by
/// its caller (a stalled node, which its replica may be about to replace).
struct Unanswered(Option<Arc<Nodes>>);

impl Unanswered {
    fn answered(&mut self) {
        self.0 = None;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(nodes) = self.0.take() {
            nodes.refresh_in_background();
        }
    }
}

/// A redirect an error reply names.
#[derive(Debug, PartialEq, Eq)]
struct Redirect {
    host: String,
    port: u16,
    ask: bool,
}

/// The redirect in `reply` (`MOVED 3999 127.0.0.1:6381`, `ASK ...`), if it is one.
fn redirect(reply: &Value) -> Option<Redirect> {
    let Value::ServerError(error) = reply else {
        return None;
    };
    let ask = match error.code() {
        "MOVED" => false,
        "ASK" => true,
        _ => return None,
    };
    let address = error.details()?.split_whitespace().nth(1)?;
    let (host, port) = address.rsplit_once(':')?;
    Some(Redirect {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: port.parse().ok()?,
        ask,
    })
}

/// The primaries' slot ranges in a `CLUSTER SLOTS` reply (an empty host is the one asked).
fn parse_slots(reply: &Value, asked: &str) -> Option<Vec<(u16, u16, String, u16)>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let number = |value: Option<&Value>| match value {
            Some(Value::Int(number)) => Some(*number),
            _ => None,
        };
        let start = u16::try_from(number(fields.first())?).ok()?;
        let end = u16::try_from(number(fields.get(1))?).ok()?;
        let Some(Value::Array(primary)) = fields.get(2) else {
            return None;
        };
        let host = match primary.first() {
            Some(Value::BulkString(bytes)) => String::from_utf8(bytes.clone()).ok()?,
            Some(Value::SimpleString(text)) => text.clone(),
            _ => return None,
        };
        let host = if host.is_empty() || host == "?" {
            asked.to_string()
        } else {
            host
        };
        let port = u16::try_from(number(primary.get(1))?).ok()?;
        ranges.push((start, end, host, port));
    }
    Some(ranges)
}

fn host_port(addr: &ConnectionAddr) -> Option<(String, u16)> {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    }
}

/// `addr` with another host and port (its TLS settings kept).
fn with_host_port(addr: &ConnectionAddr, host: &str, port: u16) -> Option<ConnectionAddr> {
    match addr {
        ConnectionAddr::Tcp(..) => Some(ConnectionAddr::Tcp(host.to_string(), port)),
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => Some(ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    fn command(words: &[&str]) -> Cmd {
        let mut cmd = Cmd::new();
        for word in words {
            cmd.arg(*word);
        }
        cmd
    }

    #[test]
    fn the_slot_is_the_first_key_s_of_each_form_the_store_sends() {
        let slot = Some(key_slot(b"{t}a"));
        for words in [
            &["RL.TOKENBUCKET", "{t}a", "10", "1"][..],
            &["rl.multi", "2", "{t}a", "{t}b", "SLIDING", "1", "1"],
            &["EVALSHA", "abc", "1", "{t}a", "x"],
            &["FCALL", "rl_multi", "2", "{t}a", "{t}b"],
        ] {
            assert_eq!(command_slot(&command(words)), slot, "{words:?}");
        }
        for words in [
            &["FUNCTION", "LOAD", "x"][..],
            &["COMMAND", "INFO", "rl.multi"],
            &["FCALL", "f", "0"],
            &["RL.MULTI", "x"],
        ] {
            assert_eq!(command_slot(&command(words)), None, "{words:?}");
        }
    }

    #[test]
    fn a_redirect_names_its_node() {
        let reply = |text: &str| redis::parse_redis_value(text.as_bytes()).unwrap();
        assert_eq!(
            redirect(&reply("-MOVED 3999 127.0.0.1:6381\r\n")),
            Some(Redirect {
                host: "127.0.0.1".into(),
                port: 6381,
                ask: false
            })
        );
        assert_eq!(
            redirect(&reply("-ASK 3999 [::1]:6381\r\n")),
            Some(Redirect {
                host: "::1".into(),
                port: 6381,
                ask: true
            })
        );
        assert_eq!(redirect(&reply("-ERR no\r\n")), None);
        assert_eq!(redirect(&reply(":1\r\n")), None);
    }

    #[test]
    fn the_map_takes_the_primaries_of_cluster_slots() {
        let reply = redis::parse_redis_value(
            b"*2\r\n*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n\
              *4\r\n:5461\r\n:16383\r\n*2\r\n$0\r\n\r\n:7001\r\n*2\r\n$1\r\nr\r\n:7002\r\n",
        )
        .unwrap();
        assert_eq!(
            parse_slots(&reply, "10.0.0.9"),
            Some(vec![
                (0, 5460, "127.0.0.1".to_string(), 7000),
                (5461, 16383, "10.0.0.9".to_string(), 7001),
            ])
        );
        assert_eq!(parse_slots(&Value::Int(1), "h"), None);

        let info = "redis://127.0.0.1:7000/".into_connection_info().unwrap();
        let nodes = Nodes::new(&[info], Duration::from_secs(1)).unwrap();
        nodes.install(&parse_slots(&reply, "10.0.0.9").unwrap());
        let at = |slot| nodes.of_slot(slot).map(|route| (route.host, route.port));
        assert_eq!(at(0), Some(("127.0.0.1".to_string(), 7000)));
        assert_eq!(at(16383), Some(("10.0.0.9".to_string(), 7001)));
        // A MOVED gives one slot to its node at once.
        nodes.learn("127.0.0.1", 7003, Some(42));
        assert_eq!(at(42), Some(("127.0.0.1".to_string(), 7003)));
        assert_eq!(at(43), Some(("127.0.0.1".to_string(), 7000)));
    }
}
