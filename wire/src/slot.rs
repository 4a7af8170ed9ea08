//! The hash slot of a key, as Redis Cluster computes it (`CLUSTER KEYSLOT`): the CRC16
//! (XMODEM) of the key's hash tag, or of the whole key when it has none, modulo 16384. The
//! client groups the limits of a call by it (one `RL.MULTI` per slot) and the tests pick keys
//! on a given node with it.

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The hash slot of `key`.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) % SLOTS
}

/// What is hashed: the bytes between the first `{` and the first `}` after it, when there is
/// at least one; otherwise the whole key (`{}` and an unclosed `{` hash the whole key).
fn hashed_part(key: &[u8]) -> &[u8] {
    let mut halves = key.splitn(2, |byte| *byte == b'{');
    let (Some(_), Some(after_open)) = (halves.next(), halves.next()) else {
        return key;
    };
    match after_open.iter().position(|byte| *byte == b'}') {
        Some(0) | None => key,
        Some(close) => after_open.get(..close).unwrap_or(key),
    }
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection, as the Redis
/// Cluster specification gives it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests;
