//! The job secret: OS randomness, key derivation and constant-time comparison.
//!
//! Every rank of a multi-process job shares one secret, the job token (`FFN_COMM_TOKEN`, which
//! `ffn launch` creates for its ranks). Nothing derived from it is ever written where another user
//! can read it: the zmq backend derives its CURVE keys and its message tag from it with
//! HMAC-SHA256 under distinct labels ([`derive`]), and the shm backend's default segment name is a
//! keyed hash of the job's identity, so it reveals nothing of the token.

use crate::CommError;

/// Shortest job token accepted: 16 characters (`ffn launch` uses 64 hex digits, 256 bits).
pub const MIN_TOKEN_LEN: usize = 16;

/// Fills `buf` from the kernel's cryptographic random source (getrandom(2)). Fails rather than
/// falling back to anything guessable.
pub fn os_random(buf: &mut [u8]) -> Result<(), CommError> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the kernel writes at most `rest.len()` bytes into `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(CommError::io("reading random bytes (getrandom)", e));
        }
        filled += n as usize;
    }
    Ok(())
}

/// Lower-case hex of `n` bytes from [`os_random`].
pub fn random_hex(n: usize) -> Result<String, CommError> {
    let mut buf = vec![0u8; n];
    os_random(&mut buf)?;
    Ok(hex(&buf))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `a == b`, in a time that depends only on the lengths (never on where they differ).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// A 32-byte key for `label`, derived from the job token: HMAC-SHA256(token, "ffn-comm/2/" label).
/// Different labels give independent keys; none reveals the token or another label's key.
pub fn derive(token: &str, label: &str) -> [u8; 32] {
    let mut mac = hmac_sha256::HMAC::new(token.as_bytes());
    mac.update(b"ffn-comm/2/");
    mac.update(label.as_bytes());
    mac.finalize()
}

/// Checks that `token` is usable as a job secret: at least [`MIN_TOKEN_LEN`] characters.
pub fn check_token(token: &str) -> Result<(), CommError> {
    if token.chars().count() >= MIN_TOKEN_LEN {
        return Ok(());
    }
    Err(CommError::Env {
        var: "FFN_COMM_TOKEN".into(),
        expected: format!(
            "the job's secret, the same on every rank, at least {MIN_TOKEN_LEN} characters \
             (`ffn launch` sets one; make one with `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`)"
        ),
        found: if token.is_empty() {
            "<unset>".into()
        } else {
            format!("<a secret of {} characters>", token.chars().count())
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_bytes_differ_and_fill_the_buffer() {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        os_random(&mut a).unwrap();
        os_random(&mut b).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, [0u8; 32]);
        assert_eq!(random_hex(16).unwrap().len(), 32);
    }

    #[test]
    fn ct_eq_is_equality() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn derived_keys_depend_on_token_and_label() {
        // RFC 4231 test case 2: HMAC-SHA256(key "Jefe", "what do ya want for nothing?").
        let mut mac = hmac_sha256::HMAC::new(b"Jefe");
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac.finalize()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let k = derive("0123456789abcdef", "a");
        assert_eq!(k, derive("0123456789abcdef", "a"));
        assert_ne!(k, derive("0123456789abcdef", "b"));
        assert_ne!(k, derive("0123456789abcdeg", "a"));
    }

    #[test]
    fn short_tokens_are_refused_without_printing_them() {
        let e = check_token("").unwrap_err().to_string();
        assert!(e.contains("FFN_COMM_TOKEN") && e.contains("<unset>"), "{e}");
        let e = check_token("hunter2").unwrap_err().to_string();
        assert!(e.contains("7 characters") && !e.contains("hunter2"), "{e}");
        assert!(check_token("0123456789abcdef").is_ok());
    }
}
