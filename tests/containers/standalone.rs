//! One container of the image: the commands over the container's own address, and restarts
//! with a volume keeping every limiter exactly, from the RDB or from the AOF, in the same
//! container and in a new one on the same volume (an upgrade).

use redis_ratelimit_testkit::docker::{Network, Spec, Volume};
use redis_ratelimit_testkit::helpers::{error_text, keys, mixed_traffic, snapshot};

use crate::setup;

/// The five integers of a limiter reply.
fn call(con: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query(con)
        .unwrap_or_else(|error| panic!("{args:?}: {error}"))
}

#[test]
fn the_image_serves_every_command_over_its_address() {
    let Some(setup) = setup() else { return };
    let network = Network::create("proto");
    let node = Spec::new(&setup.image, "proto", &network).start();
    let mut con = node.conn();

    let modules: redis::Value = redis::cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    let modules = format!("{modules:?}");
    assert!(
        modules.contains("ratelimit")
            && modules.contains("/usr/lib/redis/modules/libredis_ratelimit.so"),
        "MODULE LIST: {modules}"
    );

    // Fresh limiters of every kind, then peek and refund: the replies a new limiter gives.
    let first = [
        (vec!["RL.TOKENBUCKET", "tb", "10", "0.001"], [1, 9]),
        (vec!["RL.SLIDING", "sw", "10", "60"], [1, 9]),
        (vec!["RL.FIXED", "fw", "10", "60", "2"], [1, 8]),
        (vec!["RL.SLIDINGLOG", "sl", "10", "60"], [1, 9]),
        (vec!["CL.THROTTLE", "cl", "5", "10", "60"], [0, 6]),
        (vec!["RL.PEEK", "tb", "TOKENBUCKET", "10", "0.001"], [1, 8]),
        (
            vec!["RL.REFUND", "tb", "TOKENBUCKET", "10", "0.001"],
            [1, 10],
        ),
    ];
    let mut resp3 = redis::Client::open(format!("{}?protocol=resp3", node.url()))
        .and_then(|client| client.get_connection())
        .unwrap();
    for (args, expected) in &first {
        let reply = call(&mut con, args);
        assert_eq!(reply.len(), 5, "{args:?}: {reply:?}");
        assert_eq!(reply[..2], expected[..], "{args:?}: {reply:?}");
        // The same call on a twin key over RESP3: the same shape and decision.
        let mut twin = args.clone();
        let twin_key = format!("{}:resp3", args[1]);
        twin[1] = &twin_key;
        let reply3 = call(&mut resp3, &twin);
        assert_eq!(reply3[..2], expected[..], "RESP3 {twin:?}: {reply3:?}");
    }
    // (Not `tb`: the refund made it unused again, so it expires.)
    let kind: String = redis::cmd("TYPE").arg("sw").query(&mut con).unwrap();
    assert_eq!(kind, "ratelimit");
    let error = redis::cmd("RL.TOKENBUCKET")
        .arg("tb")
        .arg(0)
        .arg(1)
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert_eq!(
        error_text(&error),
        "ERR capacity must be greater than 0 (got '0')"
    );
    let info: String = redis::cmd("INFO").arg("ratelimit").query(&mut con).unwrap();
    assert!(
        info.contains("ratelimit_tokenbucket_admitted:2"),
        "INFO ratelimit: {info}"
    );
}

/// Limiters of every kind survive `docker restart` and a new container on the same volume,
/// exactly (DUMP and absolute expiry), loaded the way `loaded` names in the server log.
fn restart_keeps_every_limiter(persistence: &[&str], loaded: &str) {
    let Some(setup) = setup() else { return };
    let network = Network::create("restart");
    let volume = Volume::create("data");
    let spec = || {
        Spec::new(&setup.image, "restart", &network)
            .volume(&volume)
            .args(persistence)
    };
    let node = spec().start();
    let keys = keys("restart", 25);
    mixed_traffic(&mut node.conn(), &keys);
    let before = snapshot(&mut node.conn(), &keys);
    assert!(
        before
            .iter()
            .all(|(dump, expiry)| dump.is_some() && *expiry > 0)
    );

    node.restart();
    assert_eq!(
        snapshot(&mut node.conn(), &keys),
        before,
        "after docker restart"
    );
    assert!(
        node.logs().contains(loaded),
        "no '{loaded}' in the log:\n{}",
        node.logs_tail(20)
    );
    drop(node);

    let upgraded = spec().start();
    assert_eq!(
        snapshot(&mut upgraded.conn(), &keys),
        before,
        "in a new container on the same volume"
    );
}

#[test]
fn a_restart_keeps_every_limiter_from_the_rdb() {
    restart_keeps_every_limiter(&["--appendonly", "no"], "DB loaded from disk");
}

#[test]
fn a_restart_keeps_every_limiter_from_the_aof() {
    restart_keeps_every_limiter(
        &["--appendonly", "yes", "--save", ""],
        "DB loaded from append only file",
    );
}
