//! Which SIMD kernels the convolutions run: chosen at run time from the CPU's features, optionally
//! capped for the whole process ([`Simd::set_limit`], the CLI's `--simd`).
//!
//! The AVX2 and AVX-512 kernels make the same fused multiply-adds in the same order for every
//! output value (only the vector width differs), so their results are bitwise identical: a
//! segmentation does not depend on which of them ran. The portable path sums in another order
//! (and computes the 3x3x3 convs directly rather than by Winograd, see
//! [`super::winograd::preferred`]), so its results differ in the last bits.

use core::sync::atomic::{AtomicU8, Ordering};

/// An instruction set of the conv kernels, in increasing order of width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Simd {
    /// Portable Rust loops (a blocked GEMM): every CPU.
    Portable,
    /// x86-64 AVX2 and FMA: 256-bit registers, 3 voxels x 32 channels per register tile.
    Avx2,
    /// x86-64 AVX-512F (with AVX2 and FMA): 512-bit registers, up to 12 voxels x 32 channels per
    /// register tile.
    Avx512,
}

/// The process-wide cap (`u8::MAX`: none).
static LIMIT: AtomicU8 = AtomicU8::new(u8::MAX);

impl Simd {
    /// Every level, narrowest first.
    pub const ALL: [Simd; 3] = [Simd::Portable, Simd::Avx2, Simd::Avx512];

    /// The name used by `--simd` and in reports: `portable`, `avx2`, `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Portable => "portable",
            Simd::Avx2 => "avx2",
            Simd::Avx512 => "avx512",
        }
    }

    /// The level called `name` (see [`Simd::name`]).
    pub fn from_name(name: &str) -> Option<Simd> {
        Simd::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether this CPU runs the kernels of this level: detected at run time with `std`; without
    /// `std`, whether the build enables the target features (`-C target-feature=...`).
    pub fn supported(self) -> bool {
        match self {
            Simd::Portable => true,
            Simd::Avx2 => avx2_supported(),
            Simd::Avx512 => avx2_supported() && avx512_supported(),
        }
    }

    /// The widest level this CPU supports.
    pub fn best() -> Simd {
        Simd::ALL
            .into_iter()
            .rev()
            .find(|s| s.supported())
            .unwrap_or(Simd::Portable)
    }

    /// The level that runs by default: [`Simd::best`], capped by [`Simd::set_limit`].
    pub fn active() -> Simd {
        let best = Simd::best();
        match Simd::ALL.get(usize::from(LIMIT.load(Ordering::Relaxed))) {
            Some(&limit) => best.min(limit),
            None => best,
        }
    }

    /// Caps [`Simd::active`] at `limit` for the whole process (networks built afterwards use it).
    /// A limit above what the CPU supports has no effect: the widest supported level runs.
    pub fn set_limit(limit: Simd) {
        LIMIT.store(limit as u8, Ordering::Relaxed);
    }

    /// The level that actually runs when `self` is asked for: `self`, or the widest supported
    /// level below it. Kernels call this before any `unsafe` SIMD code, so asking for a level the
    /// CPU lacks is safe.
    pub fn usable(self) -> Simd {
        if self.supported() {
            self
        } else {
            Simd::best().min(self)
        }
    }
}

impl core::fmt::Display for Simd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

fn avx2_supported() -> bool {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(all(target_arch = "x86_64", not(feature = "std")))]
    {
        cfg!(all(target_feature = "avx2", target_feature = "fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn avx512_supported() -> bool {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(all(target_arch = "x86_64", not(feature = "std")))]
    {
        cfg!(target_feature = "avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_levels_degrade_to_supported_ones() {
        for s in Simd::ALL {
            assert_eq!(Simd::from_name(s.name()), Some(s));
            assert!(s.usable().supported());
            assert!(s.usable() <= s);
        }
        assert_eq!(Simd::from_name("sse"), None);
        assert!(Simd::Portable.supported());
        assert!(Simd::best().supported());
        assert!(Simd::active() <= Simd::best());
        #[cfg(feature = "std")]
        std::eprintln!("SIMD levels this CPU runs: {:?}", {
            let v: alloc::vec::Vec<_> = Simd::ALL.into_iter().filter(|s| s.supported()).collect();
            v
        });
    }
}
