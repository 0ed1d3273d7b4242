//! Direct 3D convolution on the plain channels-last layout: the slow reference that the fast paths
//! are tested against. Accumulates in f64.

use super::Conv3dParams;

/// Calls `f(out_voxel, in_voxel, tap)` for every valid (inside the volume) pair of the SAME conv.
fn for_each_tap(p: &Conv3dParams, mut f: impl FnMut(usize, usize, usize)) {
    let [sz, sy, sx] = p.size;
    let k = p.kernel;
    let h = p.half() as isize;
    for b in 0..p.batch {
        for z in 0..sz {
            for y in 0..sy {
                for x in 0..sx {
                    let o = ((b * sz + z) * sy + y) * sx + x;
                    for dz in 0..k {
                        let iz = z as isize + dz as isize - h;
                        if iz < 0 || iz >= sz as isize {
                            continue;
                        }
                        for dy in 0..k {
                            let iy = y as isize + dy as isize - h;
                            if iy < 0 || iy >= sy as isize {
                                continue;
                            }
                            for dx in 0..k {
                                let ix = x as isize + dx as isize - h;
                                if ix < 0 || ix >= sx as isize {
                                    continue;
                                }
                                let i =
                                    ((b * sz + iz as usize) * sy + iy as usize) * sx + ix as usize;
                                f(o, i, (dz * k + dy) * k + dx);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn check(p: &Conv3dParams, input: usize, weights: usize, output: usize) {
    assert!(
        p.kernel % 2 == 1,
        "conv3d: kernel edge must be odd, found {}",
        p.kernel
    );
    assert_eq!(input, p.input_len(), "conv3d: input length");
    assert_eq!(weights, p.weights_len(), "conv3d: weights length");
    assert_eq!(output, p.output_len(), "conv3d: output length");
}

/// `out = conv(input, weights) + bias` (no activation).
///
/// # Panics
/// When a buffer length does not match `p`.
pub fn forward(p: &Conv3dParams, input: &[f32], weights: &[f32], bias: &[f32], out: &mut [f32]) {
    check(p, input.len(), weights.len(), out.len());
    assert_eq!(bias.len(), p.out_channels, "conv3d: bias length");
    let (ci, co) = (p.in_channels, p.out_channels);
    let mut acc = alloc::vec![0f64; out.len()];
    for_each_tap(p, |o, i, t| {
        for c in 0..ci {
            let v = input[i * ci + c] as f64;
            let w = &weights[(t * ci + c) * co..(t * ci + c + 1) * co];
            for (a, w) in acc[o * co..(o + 1) * co].iter_mut().zip(w) {
                *a += v * *w as f64;
            }
        }
    });
    for (idx, (o, a)) in out.iter_mut().zip(&acc).enumerate() {
        *o = (*a + bias[idx % co] as f64) as f32;
    }
}

/// Gradient with respect to the input: `grad_in = d(loss)/d(input)` given `grad_out`.
///
/// # Panics
/// When a buffer length does not match `p`.
pub fn backward_input(p: &Conv3dParams, grad_out: &[f32], weights: &[f32], grad_in: &mut [f32]) {
    check(p, grad_in.len(), weights.len(), grad_out.len());
    let (ci, co) = (p.in_channels, p.out_channels);
    let mut acc = alloc::vec![0f64; grad_in.len()];
    for_each_tap(p, |o, i, t| {
        for c in 0..ci {
            let w = &weights[(t * ci + c) * co..(t * ci + c + 1) * co];
            let g = &grad_out[o * co..(o + 1) * co];
            acc[i * ci + c] += w
                .iter()
                .zip(g)
                .map(|(w, g)| *w as f64 * *g as f64)
                .sum::<f64>();
        }
    });
    for (g, a) in grad_in.iter_mut().zip(&acc) {
        *g = *a as f32;
    }
}

/// Gradients with respect to weights and bias (overwritten).
///
/// # Panics
/// When a buffer length does not match `p`.
pub fn backward_weights(
    p: &Conv3dParams,
    input: &[f32],
    grad_out: &[f32],
    grad_w: &mut [f32],
    grad_b: &mut [f32],
) {
    check(p, input.len(), grad_w.len(), grad_out.len());
    assert_eq!(grad_b.len(), p.out_channels, "conv3d: bias gradient length");
    let (ci, co) = (p.in_channels, p.out_channels);
    let mut acc = alloc::vec![0f64; grad_w.len()];
    for_each_tap(p, |o, i, t| {
        for c in 0..ci {
            let v = input[i * ci + c] as f64;
            let g = &grad_out[o * co..(o + 1) * co];
            for (a, g) in acc[(t * ci + c) * co..(t * ci + c + 1) * co]
                .iter_mut()
                .zip(g)
            {
                *a += v * *g as f64;
            }
        }
    });
    for (g, a) in grad_w.iter_mut().zip(&acc) {
        *g = *a as f32;
    }
    let mut bacc = alloc::vec![0f64; co];
    for (idx, g) in grad_out.iter().enumerate() {
        bacc[idx % co] += *g as f64;
    }
    for (g, a) in grad_b.iter_mut().zip(&bacc) {
        *g = *a as f32;
    }
}
