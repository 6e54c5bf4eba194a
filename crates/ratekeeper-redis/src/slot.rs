//! Redis Cluster hash slots: CRC16 (XMODEM) of the key's hash tag, mod 16384.

/// The hash slot of `key`, as Redis Cluster computes it: the CRC16 of the
/// part between the first `{` and the next `}` when that part is not empty,
/// of the whole key otherwise.
pub(crate) fn hash_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % 16_384
}

/// A hash tag for `slot`: a key that begins `{tag}` is in that slot,
/// whatever follows. The tags are the shortest decimal numbers of each
/// slot, found once.
pub(crate) fn slot_tag(slot: u16) -> &'static str {
    static TAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags: Vec<Option<String>> = vec![None; 16_384];
        let mut left = tags.len();
        let mut n = 0u64;
        while left > 0 {
            let tag = n.to_string();
            let slot = usize::from(crc16(tag.as_bytes()) % 16_384);
            if tags[slot].is_none() {
                tags[slot] = Some(tag);
                left -= 1;
            }
            n += 1;
        }
        tags.into_iter().map(Option::unwrap_or_default).collect()
    });
    &tags[usize::from(slot % 16_384)]
}

fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_has_a_tag() {
        for slot in [0, 1, 12_182, 16_383] {
            let key = format!("{{{}}}anything{{else}}", slot_tag(slot));
            assert_eq!(hash_slot(key.as_bytes()), slot);
        }
    }

    #[test]
    fn known_slots() {
        // From the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(hash_slot(b"foo"), 12_182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        // An empty tag is no tag: the whole key is hashed. 57,515 is its
        // CRC16 (XMODEM, Python's `binascii.crc_hqx(b"foo{}{bar}", 0)`);
        // `CLUSTER KEYSLOT foo{}{bar}` answers 8,363.
        assert_eq!(crc16(b"foo{}{bar}"), 57_515);
        assert_eq!(hash_slot(b"foo{}{bar}"), 8_363);
        assert_ne!(hash_slot(b"foo{}{bar}"), hash_slot(b"bar"));
        assert_eq!(hash_slot(b"foo{{bar}}zap"), hash_slot(b"{bar"));
        assert_eq!(hash_slot(b"foo{bar}{zap}"), hash_slot(b"bar"));
    }
}
