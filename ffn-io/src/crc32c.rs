//! CRC-32C (Castagnoli), the checksum of LevelDB tables and TensorFlow tensor bundles, with the
//! "masked" form they store.

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

/// Byte-at-a-time lookup table, built at compile time.
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// Continues a CRC-32C over more bytes (`crc` is the value returned for the bytes before).
pub fn extend(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in data {
        c = TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

/// CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    extend(0, data)
}

/// True only in fuzzing builds (`cargo fuzz` sets `--cfg fuzzing`): the readers then go on past a
/// checksum that does not match, so that mutated inputs reach the parsers behind the checksums.
/// Always false in every other build.
pub(crate) const SKIP_IN_FUZZING: bool = cfg!(fuzzing);

const MASK_DELTA: u32 = 0xa282_ead8;

/// The masked form stored by LevelDB and TensorFlow (so that a CRC of data containing CRCs is not
/// degenerate): rotate right by 15 and add a constant.
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Inverse of [`mask`].
pub fn unmask(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-at-a-time reference, straight from the definition.
    fn slow(data: &[u8]) -> u32 {
        let mut c = 0xFFFF_FFFFu32;
        for &b in data {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            }
        }
        !c
    }

    #[test]
    fn known_values() {
        // The standard check value of CRC-32C and the iSCSI test vectors (RFC 3720, B.4).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn table_matches_bitwise_reference_and_extend_composes() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        assert_eq!(crc32c(&data), slow(&data));
        assert_eq!(extend(crc32c(&data[..333]), &data[333..]), crc32c(&data));
    }

    #[test]
    fn mask_round_trips() {
        for c in [0, 1, 0xE306_9283, u32::MAX] {
            assert_eq!(unmask(mask(c)), c);
            assert_ne!(mask(c), c);
        }
    }
}
