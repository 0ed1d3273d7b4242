//! 64-bit FNV-1a, the one byte hash of ffn-rs: configuration fingerprints, collective result
//! digests and the ZeroMQ job tag all use it, so that their values agree across crates and builds.
//! Not cryptographic.

/// The FNV-1a offset basis: the hash of no bytes.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The 64-bit FNV prime.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Continues an FNV-1a hash `h` over `bytes` (start from [`FNV_OFFSET`]), so that a hash can be
/// built from several pieces: `fnv1a_extend(fnv1a(a), b) == fnv1a(a ++ b)`.
pub fn fnv1a_extend(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(FNV_OFFSET, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors() {
        // Reference values of the FNV-1a 64-bit specification (also what
        // `python3 -c "h=0xcbf29ce484222325; ..."` gives byte by byte).
        assert_eq!(fnv1a(b""), FNV_OFFSET);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        // The ZeroMQ backend's handshake tag of the job token "abc" (its value before the hash
        // moved here, commit a453a5f).
        assert_eq!(fnv1a(b"abc"), 0xe71f_a219_0541_574b);
        assert_eq!(fnv1a_extend(fnv1a(b"foo"), b"bar"), fnv1a(b"foobar"));
    }
}
