//! Intel AMX (Advanced Matrix Extensions) BF16 tile products for the 3x3x3 convolutions of
//! [`super::winograd::ConvAlgorithm::Bf16`]: one `tdpbf16ps` multiplies a 16 x 32 tile of
//! bfloat16 inputs by a 32 x 16 tile of bfloat16 weights into 16 x 16 float32 sums (8,192
//! multiply-adds; an AVX-512 FMA makes 16).
//!
//! The convs run directly (every multiply-add, no Winograd transform): 16 consecutive voxels of a
//! padded plane x 32 input channels are one input tile, read straight from the channels-last
//! bfloat16 activations at the offset of each of the 27 taps, so a sum tile gathers 27 (x in/32)
//! tile products before it is stored. Winograd's products would be 4x fewer, but with only
//! `3 x in` of depth per sum tile the tile stores and transforms cost more than they save, and
//! bfloat16 rounding grows some 30-fold through its transforms.
//!
//! AMX needs the CPU (AMX-TILE, AMX-BF16, and AVX512-BF16 for the conversions) and the operating
//! system's permission to use the tile registers, asked once per process (Linux
//! `arch_prctl(ARCH_REQ_XCOMP_PERM)`); [`available`] checks both. Without `std` or off Linux it
//! says no, and the bf16 precision runs its emulation ([`super::bf16`]).
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

/// A tile configuration (palette 1): tiles 0-3 hold sums (16 x 16 float32), 4-5 inputs (16 x 32
/// bfloat16), 6-7 weights (16 pairs of rows x 16 outputs).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = ROWS as u8;
        t += 1;
    }
    TileConfig(c)
};

/// Voxels per input tile (the rows of one tile register).
pub(crate) const ROWS: usize = 16;

/// Voxels beyond a plane that [`conv_plane`] may read (its last block of 2 x [`ROWS`] voxels
/// passes the last output voxel).
pub(crate) const SLACK_VOXELS: usize = 2 * ROWS;

/// The operands of [`conv_plane`]: one padded output plane and its three input planes.
pub(crate) struct PlaneOperands {
    /// The input planes z - 1, z, z + 1 (padded, `[voxel][in]` bfloat16), each readable for
    /// `(plane_voxels + SLACK_VOXELS) * cin` values.
    pub planes: [*const u16; 3],
    /// The weights `[tap (27)][in / 2][out]`, pairs of input channels
    /// ([`super::bf16::pack_weights`]).
    pub packed: *const u32,
    /// Input channels.
    pub cin: usize,
    /// Output channels.
    pub cout: usize,
    /// Voxels per padded row.
    pub dx: usize,
    /// Voxels per padded plane.
    pub plane_voxels: usize,
    /// The output voxels computed: `first..first + count` of the plane (`first >= dx + 1`).
    pub first: usize,
    /// See `first`.
    pub count: usize,
    /// The output plane (`[voxel][out]` float32, `plane_voxels * cout` values), sums written at
    /// the voxels computed (and at others of the plane that the last block passes).
    pub out: *mut f32,
}

/// The conv sums of voxels `first..first + count` of one output plane:
/// `out[v * cout + o] = sum over taps (tz, ty, tx) and inputs c of
/// planes[tz][(v + (ty - 1) * dx + tx - 1) * cin + c] * w(tap, c, o)`, where `w(tap, c, o)` is
/// the low (even `c`) or high (odd `c`) half of `packed[(tap * cin / 2 + c / 2) * cout + o]`.
/// Blocks of 2 x 16 voxels by 32 outputs: four sum tiles, two input and two weight tiles. A block
/// that passes the plane's end is stored through a buffer, its voxels inside the plane copied.
///
/// # Safety
/// [`available`] returned true; `cin` and `cout` are non-zero multiples of 32; the buffers of `op`
/// are as [`PlaneOperands`] says.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn conv_plane(op: &PlaneOperands) {
    let blocks = op.count.div_ceil(ROWS);
    // SAFETY (whole body): AMX is usable (caller); reads and writes as PlaneOperands allows (see
    // PlaneOperands::block).
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
        let mut b = 0;
        while b < blocks {
            let two = b + 1 < blocks;
            for nb in (0..op.cout).step_by(32) {
                if two {
                    op.block::<true>(op.first + b * ROWS, nb);
                } else {
                    op.block::<false>(op.first + b * ROWS, nb);
                }
            }
            b += if two { 2 } else { 1 };
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

/// Stores sum tiles `$c0`, `$c1` (16 voxels x 32 outputs) at `$dst`, rows `$stride` bytes apart.
#[cfg(target_arch = "x86_64")]
macro_rules! store_pair {
    ($c0:literal, $c1:literal, $dst:expr, $stride:expr) => {
        asm!(
            concat!("tilestored [{d} + {s} * 1], ", $c0),
            concat!("tilestored [{d1} + {s} * 1], ", $c1),
            d = in(reg) $dst,
            d1 = in(reg) $dst.add(16),
            s = in(reg) ($stride) as usize,
            options(nostack),
        )
    };
}

#[cfg(target_arch = "x86_64")]
impl PlaneOperands {
    /// The sums of voxels `v0..v0 + 16` (`..v0 + 32` when `TWO`), outputs `nb..nb + 32`.
    ///
    /// # Safety
    /// As [`conv_plane`], with its tile configuration loaded; `v0 >= dx + 1` and
    /// `v0 + 32 <= plane_voxels + SLACK_VOXELS - dx - 1`.
    #[inline(always)]
    unsafe fn block<const TWO: bool>(&self, v0: usize, nb: usize) {
        let (cin, cout, dx) = (self.cin, self.cout, self.dx);
        let (sa, sb) = (cin * 2, cout * 4);
        // SAFETY: every input tile reads voxels v0 - dx - 1 ..= v0 + 31 + dx + 1 of a plane,
        // inside 0..plane_voxels + SLACK_VOXELS; weight tiles rows of `packed`; stores below.
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for tap in 0..27 {
                let (tz, ty, tx) = (tap / 9, tap / 3 % 3, tap % 3);
                let voxel = v0 + ty * dx + tx - dx - 1;
                for kc in (0..cin).step_by(32) {
                    let a = self.planes[tz].add(voxel * cin + kc);
                    let b = self.packed.add((tap * cin / 2 + kc / 2) * cout + nb);
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
            // Sum rows go straight to the plane when the block lies inside it, else through
            // `edge`, copying the rows inside the plane.
            let mut edge = [0.0f32; ROWS * 32];
            let inside = |v: usize| v + ROWS <= self.plane_voxels;
            let at = |v: usize| self.out.add(v * cout + nb);
            if inside(v0) {
                store_pair!("tmm0", "tmm1", at(v0), sb);
            } else {
                store_pair!("tmm0", "tmm1", edge.as_mut_ptr(), 32 * 4);
                self.copy_rows(&edge, v0, nb);
            }
            if TWO {
                let v1 = v0 + ROWS;
                if inside(v1) {
                    store_pair!("tmm2", "tmm3", at(v1), sb);
                } else {
                    store_pair!("tmm2", "tmm3", edge.as_mut_ptr(), 32 * 4);
                    self.copy_rows(&edge, v1, nb);
                }
            }
        }
    }

    /// The rows of `edge` (16 voxels from `v0` x 32 outputs from `nb`) that lie inside the plane,
    /// into it.
    ///
    /// # Safety
    /// `out` as [`PlaneOperands`] says.
    #[inline(always)]
    unsafe fn copy_rows(&self, edge: &[f32; ROWS * 32], v0: usize, nb: usize) {
        for r in 0..ROWS.min(self.plane_voxels.saturating_sub(v0)) {
            // SAFETY: voxel v0 + r < plane_voxels, outputs nb..nb + 32 <= cout.
            unsafe {
                let dst = self.out.add((v0 + r) * self.cout + nb);
                core::ptr::copy_nonoverlapping(edge.as_ptr().add(r * 32), dst, 32);
            }
        }
    }
}

/// `src` (float32, through a ReLU when `relu`) into bfloat16 `dst`, rounded to nearest even with
/// subnormals flushed, as [`super::bf16::to_bits`].
///
/// # Safety
/// [`available`] returned true (AVX512-BF16); `src.len()` is a multiple of 32 and `dst` is
/// writable for as many values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn convert(src: &[f32], relu: bool, dst: *mut u16) {
    use core::arch::x86_64::*;
    assert!(src.len().is_multiple_of(32), "amx: {} values", src.len());
    let (s, zero) = (src.as_ptr(), _mm512_setzero_ps());
    for i in (0..src.len()).step_by(32) {
        // SAFETY: i + 32 <= src.len(), inside `src` and `dst` (caller).
        unsafe {
            let (mut lo, mut hi) = (_mm512_loadu_ps(s.add(i)), _mm512_loadu_ps(s.add(i + 16)));
            if relu {
                (lo, hi) = (_mm512_max_ps(lo, zero), _mm512_max_ps(hi, zero));
            }
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
pub(crate) unsafe fn conv_plane(_op: &PlaneOperands) {
    unreachable!("AMX products without AMX");
}

/// Not reached off x86-64: [`available`] is false there.
///
/// # Safety
/// None needed; it panics.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn convert(_src: &[f32], _relu: bool, _dst: *mut u16) {
    unreachable!("AMX conversion without AVX512-BF16");
}
