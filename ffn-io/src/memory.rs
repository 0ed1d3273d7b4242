//! The documented limit on what one read may allocate: a volume, slice or stack read into memory
//! may take at most the memory the process may use ([`memory_limit_bytes`]: the machine's physical
//! memory, or the process's address-space limit `RLIMIT_AS` where that is lower).
//! Anything larger cannot succeed and would only make the process swap or be killed, so it is
//! refused up front with an error naming the file, what it declares and the limit; such volumes
//! are read by region or segmented with `ffn infer-tiled`.

/// Bytes of physical memory, or `u64::MAX` where the system does not say.
pub fn physical_memory_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name or value.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || page <= 0 {
        return u64::MAX;
    }
    (pages as u64).saturating_mul(page as u64)
}

/// The memory this process may use: the smaller of [`physical_memory_bytes`] and its soft
/// address-space limit (`RLIMIT_AS`, as set by `ulimit -v` or a batch system).
pub fn memory_limit_bytes() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    let address_space = if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0
        && lim.rlim_cur != libc::RLIM_INFINITY
    {
        lim.rlim_cur
    } else {
        u64::MAX
    };
    physical_memory_bytes().min(address_space)
}

/// Bytes of `count` elements of `element_bytes` each, `None` on overflow.
pub fn bytes_of(dims: &[usize], element_bytes: usize) -> Option<u64> {
    dims.iter()
        .try_fold(element_bytes as u64, |acc, &d| acc.checked_mul(d as u64))
}

/// `Ok` when an allocation of `bytes` (`None`: beyond `u64`) is within [`memory_limit_bytes`];
/// otherwise the reason, naming `what` is being read.
pub fn check_allocation(what: &str, bytes: Option<u64>) -> Result<(), String> {
    let limit = memory_limit_bytes();
    match bytes {
        Some(b) if b <= limit => Ok(()),
        Some(b) => Err(format!(
            "{what} needs {b} bytes in memory, more than the {limit} bytes this process may use \
             (physical memory or its address-space limit; read it by region, train with \
             `--volume-reads regions`, or segment it with `ffn infer-tiled`)"
        )),
        None => Err(format!("{what} is too large to address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_overflow_to_none_and_big_ones_are_refused() {
        assert_eq!(bytes_of(&[2, 3, 4], 8), Some(192));
        assert_eq!(bytes_of(&[usize::MAX, 2], 1), None);
        assert!(check_allocation("x", Some(1 << 20)).is_ok());
        let err = check_allocation("a 1700^3 volume", Some(u64::MAX)).unwrap_err();
        assert!(
            err.contains("a 1700^3 volume") && err.contains("physical memory"),
            "{err}"
        );
        assert!(
            check_allocation("y", None)
                .unwrap_err()
                .contains("too large")
        );
        assert!(physical_memory_bytes() > 1 << 20);
    }
}
