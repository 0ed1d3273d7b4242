//! One safe, bounds-checked single-precision GEMM on strided views, used by the fast conv paths.
//!
//! With `std` it calls the `gemm` crate (runtime-dispatched AVX2/AVX-512 kernels); without `std` a
//! simple blocked scalar loop that the compiler vectorises.

/// A strided read-only matrix view: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

fn span(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * rs + (cols - 1) * cs + 1
    }
}

/// `dst (m x n, row stride dst_rs, unit column stride) (+)= lhs (m x k) * rhs (k x n)`.
///
/// Overwrites `dst` when `accumulate` is false. Views may overlap themselves (rows that share
/// elements, as a virtual im2col matrix does).
///
/// # Panics
/// When a view reaches past its slice or `dst` rows overlap (`dst_rs < n`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    lhs: View<'_>,
    rhs: View<'_>,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(dst_rs >= n, "sgemm: dst rows overlap");
    assert!(span(m, n, dst_rs, 1) <= dst.len(), "sgemm: dst too short");
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                dst[i * dst_rs..i * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    assert!(
        span(m, k, lhs.rs, lhs.cs) <= lhs.data.len(),
        "sgemm: lhs too short"
    );
    assert!(
        span(k, n, rhs.rs, rhs.cs) <= rhs.data.len(),
        "sgemm: rhs too short"
    );
    kernel(m, n, k, dst, dst_rs, accumulate, lhs, rhs);
}

#[cfg(feature = "std")]
#[allow(clippy::too_many_arguments)]
fn kernel(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    lhs: View<'_>,
    rhs: View<'_>,
) {
    // SAFETY: the caller checked that every index the views address lies inside their slices and
    // that dst rows do not overlap; `dst` is exclusively borrowed and the inputs are shared borrows
    // of other buffers, so dst does not alias them. Parallelism::None: no threads are started.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(not(feature = "std"))]
#[allow(clippy::too_many_arguments)]
fn kernel(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    lhs: View<'_>,
    rhs: View<'_>,
) {
    reference_kernel(m, n, k, dst, dst_rs, accumulate, lhs, rhs);
}

/// The portable kernel: i-l-j loop order so that the inner loop streams a row of `rhs` and `dst`.
#[allow(clippy::too_many_arguments, dead_code)]
pub(crate) fn reference_kernel(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    lhs: View<'_>,
    rhs: View<'_>,
) {
    const KB: usize = 64;
    for i in 0..m {
        let row = &mut dst[i * dst_rs..i * dst_rs + n];
        if !accumulate {
            row.fill(0.0);
        }
        for l0 in (0..k).step_by(KB) {
            for l in l0..(l0 + KB).min(k) {
                let a = lhs.data[i * lhs.rs + l * lhs.cs];
                if rhs.cs == 1 {
                    let r = &rhs.data[l * rhs.rs..l * rhs.rs + n];
                    for (d, b) in row.iter_mut().zip(r) {
                        *d += a * b;
                    }
                } else {
                    for (j, d) in row.iter_mut().enumerate() {
                        *d += a * rhs.data[l * rhs.rs + j * rhs.cs];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn strided_and_overlapping_views_match_naive_sum() {
        // lhs rows overlap (row stride 2, 5 columns), rhs transposed view.
        let (m, n, k) = (7, 3, 5);
        let a: Vec<f32> = (0..40).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..40).map(|i| (i as f32 * 0.11).cos()).collect();
        let lhs = View {
            data: &a,
            rs: 2,
            cs: 1,
        };
        let rhs = View {
            data: &b,
            rs: 1,
            cs: 6,
        };
        for accumulate in [false, true] {
            let mut dst = vec![0.5f32; m * 4];
            let mut want = dst.clone();
            for i in 0..m {
                for j in 0..n {
                    let s: f32 = (0..k).map(|l| a[i * 2 + l] * b[l + j * 6]).sum();
                    want[i * 4 + j] = if accumulate { want[i * 4 + j] + s } else { s };
                }
            }
            sgemm(m, n, k, &mut dst, 4, accumulate, lhs, rhs);
            for (x, y) in dst.iter().zip(&want) {
                assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            }
            let mut dst2 = vec![0.5f32; m * 4];
            reference_kernel(m, n, k, &mut dst2, 4, accumulate, lhs, rhs);
            for (x, y) in dst2.iter().zip(&want) {
                assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "lhs too short")]
    fn out_of_bounds_view_panics() {
        let a = vec![0.0f32; 10];
        let mut d = vec![0.0f32; 4];
        sgemm(
            2,
            2,
            3,
            &mut d,
            2,
            false,
            View {
                data: &a,
                rs: 8,
                cs: 1,
            },
            View {
                data: &a,
                rs: 2,
                cs: 1,
            },
        );
    }
}
