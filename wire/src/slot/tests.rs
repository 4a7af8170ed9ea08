#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn the_specifications_check_value() {
    // The Redis Cluster specification: "the output of CRC16 of '123456789' is 0x31C3".
    assert_eq!(crc16(b"123456789"), 0x31C3);
}

#[test]
fn slots_as_cluster_keyslot_answers() {
    // What `CLUSTER KEYSLOT` answers (redis-server 7.0.15).
    for (key, slot) in [
        ("foo", 12182),
        ("bar", 5061),
        ("somekey", 11058),
        ("", 0),
        ("{user1000}.following", 3443),
        ("{user1000}.followers", 3443),
        ("user1000", 3443),
        ("foo{}{bar}", 8363),
        ("foo{{bar}}zap", 4015),
        ("foo{bar}{zap}", 5061),
        ("{", 4092),
        ("rl:{global}", 10408),
    ] {
        assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
    }
}
