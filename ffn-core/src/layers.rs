//! Element-wise layers of the network and their backward passes: ReLU, residual add, and the
//! concatenation of image and mask into the two input channels.
//!
//! # Shapes
//! All functions work on flat buffers of any layout; shapes only have to agree element for element
//! (channels-last `[batch, z, y, x, channels]` in the network, see [`crate::tensor`]).

use crate::parallel::{ELEMENTWISE_CHUNK, for_each_chunk_mut};
use crate::tensor::Padded;

fn check(what: &str, a: usize, b: usize) {
    assert_eq!(a, b, "{what}: buffer lengths differ");
}

/// `out = max(x, 0)`.
///
/// # Panics
/// When the lengths differ.
pub fn relu(x: &[f32], out: &mut [f32]) {
    check("relu", x.len(), out.len());
    for_each_chunk_mut(out, ELEMENTWISE_CHUNK, |i, o| {
        let x = &x[i * ELEMENTWISE_CHUNK..];
        o.iter_mut().zip(x).for_each(|(o, x)| *o = x.max(0.0));
    });
}

/// ReLU backward in place: `grad *= (y > 0)`, where `y` is the ReLU's output (or its input: the
/// sign is the same).
///
/// # Panics
/// When the lengths differ.
pub fn relu_backward(y: &[f32], grad: &mut [f32]) {
    check("relu_backward", y.len(), grad.len());
    for_each_chunk_mut(grad, ELEMENTWISE_CHUNK, |i, g| {
        let y = &y[i * ELEMENTWISE_CHUNK..];
        g.iter_mut().zip(y).for_each(|(g, y)| {
            if *y <= 0.0 {
                *g = 0.0
            }
        });
    });
}

/// Residual add in place: `acc += x`. Its backward pass passes the gradient to both operands.
///
/// # Panics
/// When the lengths differ.
pub fn add_assign(acc: &mut [f32], x: &[f32]) {
    check("add_assign", acc.len(), x.len());
    for_each_chunk_mut(acc, ELEMENTWISE_CHUNK, |i, a| {
        let x = &x[i * ELEMENTWISE_CHUNK..];
        a.iter_mut().zip(x).for_each(|(a, x)| *a += x);
    });
}

/// Fused backward of `x_next = x + f(relu(x))` with respect to `x`:
/// `grad_x += grad_r * (x > 0)`, where `grad_r` is the gradient reaching `relu(x)`.
///
/// # Panics
/// When the lengths differ.
pub fn add_relu_backward(grad_x: &mut [f32], grad_r: &[f32], x: &[f32]) {
    check("add_relu_backward", grad_x.len(), grad_r.len());
    check("add_relu_backward", grad_x.len(), x.len());
    for_each_chunk_mut(grad_x, ELEMENTWISE_CHUNK, |i, g| {
        let r = &grad_r[i * ELEMENTWISE_CHUNK..];
        let x = &x[i * ELEMENTWISE_CHUNK..];
        for ((g, r), x) in g.iter_mut().zip(r).zip(x) {
            if *x > 0.0 {
                *g += r;
            }
        }
    });
}

/// Concatenates two single-channel volumes (image, mask) into the two channels of `out`:
/// `out[v] = [a[v], b[v]]`.
///
/// # Panics
/// When `a` and `b` differ in length or `out` is not twice as long.
pub fn concat2(a: &[f32], b: &[f32], out: &mut [f32]) {
    check("concat2", a.len(), b.len());
    check("concat2", 2 * a.len(), out.len());
    for ((o, a), b) in out.chunks_exact_mut(2).zip(a).zip(b) {
        o[0] = *a;
        o[1] = *b;
    }
}

/// [`concat2`] straight into the interior of a zero-bordered padded buffer of geometry `g`
/// (`a`, `b`: plain `[batch, z, y, x]`; `out`: `g.len(2)`).
///
/// # Panics
/// When a length does not match `g`.
pub fn concat2_padded(g: &Padded, a: &[f32], b: &[f32], out: &mut [f32]) {
    check("concat2_padded", a.len(), g.interior_voxels());
    check("concat2_padded", b.len(), g.interior_voxels());
    check("concat2_padded", out.len(), g.len(2));
    out.fill(0.0);
    let [sz, sy, sx] = g.size;
    let mut src = 0;
    for bi in 0..g.batch {
        for z in 0..sz {
            for y in 0..sy {
                let d = g.voxel(bi, z, y, 0) * 2;
                concat2(
                    &a[src..src + sx],
                    &b[src..src + sx],
                    &mut out[d..d + 2 * sx],
                );
                src += sx;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::testutil::{finite_diff, uniform};
    use alloc::vec;

    #[test]
    fn relu_gradient_matches_finite_differences() {
        let mut rng = Rng::new(crate::testutil::seed(3));
        // Keep values away from the kink at 0, where the derivative is undefined.
        let mut x: alloc::vec::Vec<f32> = uniform(&mut rng, 200)
            .iter()
            .map(|v| if v.abs() < 0.05 { v + 0.1 } else { *v })
            .collect();
        let r = uniform(&mut rng, 200);
        let loss = |x: &[f32]| {
            let mut y = vec![0.0; x.len()];
            relu(x, &mut y);
            y.iter().zip(&r).map(|(y, r)| (*y * *r) as f64).sum::<f64>()
        };
        let mut y = vec![0.0; 200];
        relu(&x, &mut y);
        let mut g = r.clone();
        relu_backward(&y, &mut g);
        for i in 0..x.len() {
            let fd = finite_diff(&mut x, i, 1e-3, loss);
            assert!((fd - g[i] as f64).abs() < 1e-3, "{i}: {fd} vs {}", g[i]);
        }
    }

    #[test]
    fn add_and_fused_residual_backward_match_finite_differences() {
        let mut rng = Rng::new(crate::testutil::seed(4));
        let n = 150;
        let mut x: alloc::vec::Vec<f32> = uniform(&mut rng, n)
            .iter()
            .map(|v| if v.abs() < 0.05 { v + 0.1 } else { *v })
            .collect();
        let c = uniform(&mut rng, n);
        let r = uniform(&mut rng, n);
        // L = sum(r * (x + c * relu(x))): the add with a residual branch f(relu(x)) = c * relu(x).
        let loss = |x: &[f32]| {
            let mut y = vec![0.0; n];
            relu(x, &mut y);
            y.iter_mut().zip(&c).for_each(|(y, c)| *y *= c);
            add_assign(&mut y, x);
            y.iter().zip(&r).map(|(y, r)| (*y * *r) as f64).sum::<f64>()
        };
        let mut grad_x = r.clone(); // through the skip connection
        let grad_r: alloc::vec::Vec<f32> = r.iter().zip(&c).map(|(r, c)| r * c).collect();
        add_relu_backward(&mut grad_x, &grad_r, &x);
        for i in 0..n {
            let fd = finite_diff(&mut x, i, 1e-3, loss);
            assert!(
                (fd - grad_x[i] as f64).abs() < 1e-3,
                "{i}: {fd} vs {}",
                grad_x[i]
            );
        }
    }

    #[test]
    fn concat_interleaves_channels_and_pads() {
        let mut out = vec![0.0; 6];
        concat2(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &mut out);
        assert_eq!(out, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let g = Padded::new(1, [1, 1, 3], 1);
        let mut p = vec![9.0; g.len(2)];
        concat2_padded(&g, &[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &mut p);
        let mut plain = vec![0.0; 6];
        g.unpad_into(&p, 2, &mut plain);
        assert_eq!(plain, out);
        assert_eq!(p.iter().filter(|v| **v != 0.0).count(), 6);
    }
}
