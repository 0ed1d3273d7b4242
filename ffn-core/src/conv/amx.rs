//! Intel AMX (Advanced Matrix Extensions) BF16 tile products for the F(4x4, 3x3) convolutions of
//! [`super::winograd::ConvAlgorithm::WinogradBf16`]: one `tdpbf16ps` multiplies a 16 x 32 tile
//! of bfloat16 inputs by a 32 x 16 tile of bfloat16 weights into 16 x 16 float32 sums (8,192
//! multiply-adds; an AVX-512 FMA makes 16).
//!
//! AMX needs the CPU (AMX-TILE, AMX-BF16, and AVX512-BF16 for the conversions) and the operating
//! system's permission to use the tile registers, asked once per process (Linux
//! `arch_prctl(ARCH_REQ_XCOMP_PERM)`); [`available`] checks both. Without `std` or off Linux it
//! says no, and the bf16 precision runs its emulation ([`super::winograd2d::bf16`]).
//!
//! The tile registers are never used by compiled code, so the kernel keeps them between its
//! `asm!` blocks; every call loads the tile configuration first and releases the tiles at the end.

#[cfg(target_arch = "x86_64")]
use core::arch::asm;
use core::sync::atomic::{AtomicU8, Ordering};

/// Whether AMX was found usable: 0 not checked yet, 1 yes, 2 no.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether this process may run the AMX BF16 kernels: the CPU has AMX-TILE, AMX-BF16, AVX-512F
/// and AVX512-BF16, and the operating system granted the tile data state (asked on the first
/// call).
pub fn available() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let ok = detect();
            STATE.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", feature = "std"))]
fn detect() -> bool {
    #[allow(unused_unsafe)] // __cpuid_count is safe in newer Rust
    // SAFETY: CPUID leaf 7 exists on every x86-64 CPU that reports AVX-512F (checked first).
    let leaf7 = unsafe { core::arch::x86_64::__cpuid_count(7, 0) };
    let (amx_bf16, amx_tile) = (leaf7.edx & (1 << 22) != 0, leaf7.edx & (1 << 24) != 0);
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bf16")
        && amx_bf16
        && amx_tile
        && request_tile_permission()
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", feature = "std")))]
fn detect() -> bool {
    false
}

/// Asks Linux for the AMX tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`,
/// process-wide); false when the kernel refuses or predates it.
#[cfg(all(target_arch = "x86_64", target_os = "linux", feature = "std"))]
fn request_tile_permission() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: a system call that only changes this process's permitted state components; it
    // reads no memory of ours. rcx and r11 are clobbered by `syscall`.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

/// A tile configuration (palette 1): tiles 0-3 hold sums (`rows` x 16 float32), 4-5 inputs
/// (`rows` x 32 bfloat16), 6-7 weights (16 pairs of rows x 16 outputs).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn new(rows: usize) -> Self {
        debug_assert!((1..=ROWS).contains(&rows));
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            c[16 + 2 * t] = 64;
            c[48 + t] = if t < 6 { rows as u8 } else { ROWS as u8 };
        }
        TileConfig(c)
    }
}

/// Tiles per row block of the products (the rows of one tile register).
pub(crate) const ROWS: usize = 16;

/// The operands of [`plane_products`]: one output plane's bfloat16 tap planes (each
/// `[yx index][tile][in]`, `tt * ntiles * cin` values), packed weights
/// ([`super::winograd2d::bf16::pack_weights`], `tt * 3 * cin / 2 * cout` pairs) and its float32
/// sums (`[tile][yx index][out]`, `ntiles * tt * cout` values).
pub(crate) struct Operands {
    /// The transformed input planes before, at and after the output plane.
    pub taps: [*const u16; 3],
    /// The weights, pairs of input channels.
    pub packed: *const u32,
    /// Input channels.
    pub cin: usize,
    /// Output channels.
    pub cout: usize,
    /// Tiles of the plane.
    pub ntiles: usize,
    /// Transformed values per tile (36 for F(4x4, 3x3)).
    pub tt: usize,
    /// Where the sums go.
    pub sums: *mut f32,
}

/// The sums of one output plane, as [`super::winograd2d`]'s float32 products, from bfloat16 tap
/// planes and weights: for every yx index `k < tt`, tile `t` and output `o`,
/// `sums[(t * tt + k) * cout + o] = sum over z tap tz and input c of
/// taps[tz][(k * ntiles + t) * cin + c] * w(k, tz, c, o)`, where `w(k, tz, c, o)` is the low
/// (even `c`) or high (odd `c`) half of `packed[((k * 3 + tz) * cin / 2 + c / 2) * cout + o]`.
///
/// Blocks of 2 x 16 tiles by 32 outputs (four sum tiles, two input and two weight tiles: one tile
/// load per tile product); the tiles beyond the last multiple of 16 in a second pass with a
/// configuration of that many rows.
///
/// # Safety
/// [`available`] returned true; `cin` and `cout` are non-zero multiples of 32; the buffers of `op`
/// hold the values [`Operands`] lists.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn plane_products(op: &Operands) {
    let (ntiles, tt) = (op.ntiles, op.tt);
    let full = ntiles / ROWS * ROWS;
    // SAFETY (whole body): AMX is usable (caller); the blocks stay inside the tiles, inputs and
    // outputs of the plane (see Operands::products).
    unsafe {
        if full > 0 {
            let config = TileConfig::new(ROWS);
            asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
            for k in 0..tt {
                let mut mb = 0;
                while mb + 2 * ROWS <= full {
                    op.products::<true>(k, mb);
                    mb += 2 * ROWS;
                }
                if mb < full {
                    op.products::<false>(k, mb);
                }
            }
        }
        if full < ntiles {
            let config = TileConfig::new(ntiles - full);
            asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
            for k in 0..tt {
                op.products::<false>(k, full);
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

#[cfg(target_arch = "x86_64")]
impl Operands {
    /// The sums of yx index `k` for the tiles from `mb` (as many as the loaded configuration's
    /// rows; twice that when `TWO`) and every output.
    ///
    /// # Safety
    /// As [`plane_products`], with a configuration loaded whose rows (doubled when `TWO`) from
    /// `mb` stay below `ntiles`.
    #[inline(always)]
    unsafe fn products<const TWO: bool>(&self, k: usize, mb: usize) {
        let (cin, cout, tt) = (self.cin, self.cout, self.tt);
        let (sa, sb, sc) = (cin * 2, cout * 4, tt * cout * 4);
        // SAFETY: input rows mb..mb + rows (+ ROWS) of part k of each tap plane, weight rows of
        // (k, tz) inside `packed`, sum rows below ntiles: inside the buffers (caller).
        unsafe {
            for nb in (0..cout).step_by(32) {
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    options(nostack, nomem)
                );
                for (tz, tap) in self.taps.iter().enumerate() {
                    for kc in (0..cin).step_by(32) {
                        let a = tap.add((k * self.ntiles + mb) * cin + kc);
                        let b = self
                            .packed
                            .add(((k * 3 + tz) * cin / 2 + kc / 2) * cout + nb);
                        if TWO {
                            asm!(
                                "tileloadd tmm4, [{a} + {sa} * 1]",
                                "tileloadd tmm5, [{a1} + {sa} * 1]",
                                "tileloadd tmm6, [{b} + {sb} * 1]",
                                "tileloadd tmm7, [{b1} + {sb} * 1]",
                                "tdpbf16ps tmm0, tmm4, tmm6",
                                "tdpbf16ps tmm1, tmm4, tmm7",
                                "tdpbf16ps tmm2, tmm5, tmm6",
                                "tdpbf16ps tmm3, tmm5, tmm7",
                                a = in(reg) a,
                                a1 = in(reg) a.add(ROWS * cin),
                                b = in(reg) b,
                                b1 = in(reg) b.add(16),
                                sa = in(reg) sa,
                                sb = in(reg) sb,
                                options(nostack, readonly),
                            );
                        } else {
                            asm!(
                                "tileloadd tmm4, [{a} + {sa} * 1]",
                                "tileloadd tmm6, [{b} + {sb} * 1]",
                                "tileloadd tmm7, [{b1} + {sb} * 1]",
                                "tdpbf16ps tmm0, tmm4, tmm6",
                                "tdpbf16ps tmm1, tmm4, tmm7",
                                a = in(reg) a,
                                b = in(reg) b,
                                b1 = in(reg) b.add(16),
                                sa = in(reg) sa,
                                sb = in(reg) sb,
                                options(nostack, readonly),
                            );
                        }
                    }
                }
                let d = self.sums.add((mb * tt + k) * cout + nb);
                asm!(
                    "tilestored [{d} + {s} * 1], tmm0",
                    "tilestored [{d1} + {s} * 1], tmm1",
                    d = in(reg) d,
                    d1 = in(reg) d.add(16),
                    s = in(reg) sc,
                    options(nostack),
                );
                if TWO {
                    let d = d.add(ROWS * tt * cout);
                    asm!(
                        "tilestored [{d} + {s} * 1], tmm2",
                        "tilestored [{d1} + {s} * 1], tmm3",
                        d = in(reg) d,
                        d1 = in(reg) d.add(16),
                        s = in(reg) sc,
                        options(nostack),
                    );
                }
            }
        }
    }
}

/// A transformed plane `src` (float32) into bfloat16 `dst` of the same layout, rounded to
/// nearest even with subnormals flushed, as [`super::winograd2d::bf16::to_bits`].
///
/// # Safety
/// [`available`] returned true (AVX512-BF16); `src.len()` is a multiple of 32 and `dst` is
/// writable for as many values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn convert_plane(src: &[f32], dst: *mut u16) {
    use core::arch::x86_64::*;
    assert!(
        src.len().is_multiple_of(32),
        "amx: plane of {} values",
        src.len()
    );
    let s = src.as_ptr();
    for i in (0..src.len()).step_by(32) {
        // SAFETY: i + 32 <= src.len(), inside `src` and `dst` (caller).
        unsafe {
            let lo = _mm512_loadu_ps(s.add(i));
            let hi = _mm512_loadu_ps(s.add(i + 16));
            let v = _mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(
                dst.add(i).cast(),
                core::mem::transmute::<__m512bh, __m512i>(v),
            );
        }
    }
}

/// Not reached off x86-64: [`available`] is false there.
///
/// # Safety
/// None needed; it panics.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn plane_products(_op: &Operands) {
    unreachable!("AMX products without AMX");
}

/// Not reached off x86-64: [`available`] is false there.
///
/// # Safety
/// None needed; it panics.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn convert_plane(_src: &[f32], _dst: *mut u16) {
    unreachable!("AMX conversion without AVX512-BF16");
}
