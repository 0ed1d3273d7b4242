//! Seed policies: where the canvas tries to start new objects.
//!
//! - [`policy_peaks`] (google/ffn's `PolicyPeaks`, its default): points far from image edges. The
//!   3D Sobel gradient magnitude is thresholded against its own Gaussian blur (sigma 49/6) to find
//!   edges; the Euclidean distance transform to the nearest edge (with voxel anisotropy) is computed,
//!   tiny reproducible noise breaks ties, and the local maxima (cube of radius `min_distance`, away
//!   from the border by `min_distance`) are returned in `[z, y, x]` lexicographic order.
//! - [`policy_grid`] (`PolicyGrid3d`): a regular grid, repeated at several offsets.
//! - An explicit list needs no code: pass it to [`super::Canvas::segment_all`].
//!
//! The filters follow scipy.ndimage's conventions (mode `reflect`, float32 results between passes,
//! Gaussian truncated at 4 sigma) and the noise is numpy's legacy Mersenne Twister seeded with 42,
//! so that the seeds match google/ffn's on the same normalised image up to the last-bit differences
//! of `exp`.

use alloc::vec;
use alloc::vec::Vec;

use super::CanvasImage;

/// Options of [`policy_peaks`]; the defaults are google/ffn's.
#[derive(Clone, Debug, PartialEq)]
pub struct PeaksOptions {
    /// Sigma of the Gaussian blur giving the adaptive edge threshold (49/6).
    pub sigma: f64,
    /// Half-size of the local-maximum cube, and the excluded border width (3).
    pub min_distance: usize,
    /// Voxel size `[z, y, x]` for the distance transform ([1, 1, 1]).
    pub voxel_size: [f64; 3],
    /// Seed of the tie-breaking noise (numpy `RandomState` seed, 42).
    pub noise_seed: u32,
    /// Amplitude of the tie-breaking noise (1e-4).
    pub noise_amplitude: f64,
}

impl Default for PeaksOptions {
    fn default() -> Self {
        Self {
            sigma: 49.0 / 6.0,
            min_distance: 3,
            voxel_size: [1.0; 3],
            noise_seed: 42,
            noise_amplitude: 1e-4,
        }
    }
}

/// scipy's `reflect` boundary (`d c b a | a b c d | d c b a`).
fn reflect(i: i64, n: usize) -> usize {
    let n = n as i64;
    let m = i.rem_euclid(2 * n);
    (if m >= n { 2 * n - 1 - m } else { m }) as usize
}

/// Strides of a `[z, y, x]` volume.
fn strides(shape: [usize; 3]) -> [usize; 3] {
    [shape[1] * shape[2], shape[2], 1]
}

/// Replaces every line of `data` along `axis` by `f(line_in, line_out)` (the line is copied
/// aside first, so `f` reads the old values while the new ones are written).
fn for_lines(
    data: &mut [f32],
    shape: [usize; 3],
    axis: usize,
    mut f: impl FnMut(&[f32], &mut [f32]),
) {
    let st = strides(shape);
    let n = shape[axis];
    let others: Vec<usize> = (0..3).filter(|&a| a != axis).collect();
    let mut line = vec![0f32; n];
    let mut out = vec![0f32; n];
    for i in 0..shape[others[0]] {
        for j in 0..shape[others[1]] {
            let base = i * st[others[0]] + j * st[others[1]];
            for (k, l) in line.iter_mut().enumerate() {
                *l = data[base + k * st[axis]];
            }
            f(&line, &mut out);
            for (k, &o) in out.iter().enumerate() {
                data[base + k * st[axis]] = o;
            }
        }
    }
}

/// scipy `correlate1d` of a symmetric (`antisymmetric == false`, `w[r + j] == w[r - j]`) or
/// antisymmetric kernel `w` of length `2r + 1` along `axis`, mode reflect, accumulating in f64 in
/// scipy's order and rounding to f32; in place (one line buffer, no second volume).
fn correlate_axis(
    data: &mut [f32],
    shape: [usize; 3],
    axis: usize,
    w: &[f64],
    antisymmetric: bool,
) {
    let r = w.len() / 2;
    let n = shape[axis];
    if n == 0 {
        return;
    }
    let mut ext = vec![0f64; n + 2 * r];
    for_lines(data, shape, axis, |line, out| {
        for (k, e) in ext.iter_mut().enumerate() {
            *e = line[reflect(k as i64 - r as i64, n)] as f64;
        }
        for (q, o) in out.iter_mut().enumerate() {
            let c = q + r;
            let mut acc = ext[c] * w[r];
            for j in (1..=r).rev() {
                acc += if antisymmetric {
                    (ext[c - j] - ext[c + j]) * w[r - j]
                } else {
                    (ext[c - j] + ext[c + j]) * w[r - j]
                };
            }
            *o = acc as f32;
        }
    });
}

/// The 3D Sobel gradient magnitude (scipy `generic_gradient_magnitude(image, sobel)`): for each
/// axis, the `[-1, 0, 1]` derivative along it smoothed by `[1, 2, 1]` along the others; the squares
/// are summed in f32 and square-rooted. Raw 8-bit voxels are normalised as they are read, so no
/// normalised copy of the volume is made.
pub fn sobel_magnitude<'a>(image: impl Into<CanvasImage<'a>>, shape: [usize; 3]) -> Vec<f32> {
    let image = image.into();
    let mut acc = vec![0f32; image.len()];
    let mut d = vec![0f32; image.len()];
    for axis in 0..3 {
        image.copy_normalised(0, &mut d);
        correlate_axis(&mut d, shape, axis, &[-1.0, 0.0, 1.0], true);
        for other in (0..3).filter(|&a| a != axis) {
            correlate_axis(&mut d, shape, other, &[1.0, 2.0, 1.0], false);
        }
        for (a, &v) in acc.iter_mut().zip(&d) {
            *a += v * v;
        }
    }
    for a in &mut acc {
        *a = libm::sqrtf(*a);
    }
    acc
}

/// numpy's pairwise summation for fewer than 128 values (8 interleaved partial sums).
fn numpy_sum(v: &[f64]) -> f64 {
    if v.len() < 8 {
        return v.iter().fold(0.0, |a, &b| a + b);
    }
    let mut r = [0f64; 8];
    r.copy_from_slice(&v[..8]);
    let full = v.len() - v.len() % 8;
    for i in (8..full).step_by(8) {
        for k in 0..8 {
            r[k] += v[i + k];
        }
    }
    let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for &x in &v[full..] {
        res += x;
    }
    res
}

/// The normalised Gaussian kernel of scipy (radius `round(4 sigma)`).
pub fn gaussian_kernel(sigma: f64) -> Vec<f64> {
    let radius = (4.0 * sigma + 0.5) as i64;
    let s2 = sigma * sigma;
    let phi: Vec<f64> = (-radius..=radius)
        .map(|x| libm::exp(-0.5 / s2 * (x * x) as f64))
        .collect();
    let sum = numpy_sum(&phi);
    phi.iter().map(|p| p / sum).collect()
}

/// scipy `gaussian_filter(image, sigma, mode='reflect')` into float32 (axes z, y, x in turn).
pub fn gaussian_blur(image: &[f32], shape: [usize; 3], sigma: f64) -> Vec<f32> {
    let w = gaussian_kernel(sigma);
    let mut v = image.to_vec();
    for axis in 0..3 {
        correlate_axis(&mut v, shape, axis, &w, false);
    }
    v
}

/// Squared Euclidean distance transform along one line (Felzenszwalb & Huttenlocher): `f` holds 0
/// at features, squared distances from earlier passes, or infinity; `w2` is the squared voxel size.
fn edt_line(f: &[f64], w2: f64, d: &mut [f64], v: &mut [usize], z: &mut [f64]) {
    let n = f.len();
    let mut k: usize = 0;
    let mut any = false;
    for q in 0..n {
        if !f[q].is_finite() {
            continue;
        }
        if !any {
            v[0] = q;
            z[0] = f64::NEG_INFINITY;
            z[1] = f64::INFINITY;
            any = true;
            continue;
        }
        let qf = q as f64;
        loop {
            let p = v[k];
            let pf = p as f64;
            let s = ((f[q] + w2 * qf * qf) - (f[p] + w2 * pf * pf)) / (2.0 * w2 * (qf - pf));
            if s <= z[k] {
                // z[0] is -inf, so k > 0 here.
                k -= 1;
                continue;
            }
            k += 1;
            v[k] = q;
            z[k] = s;
            z[k + 1] = f64::INFINITY;
            break;
        }
    }
    if !any {
        d.fill(f64::INFINITY);
        return;
    }
    let mut k = 0;
    for (q, dq) in d.iter_mut().enumerate() {
        while z[k + 1] < q as f64 {
            k += 1;
        }
        let diff = q as f64 - v[k] as f64;
        *dq = w2 * diff * diff + f[v[k]];
    }
}

/// Euclidean distance from every voxel to the nearest `feature` voxel (0 on features), with voxel
/// size `voxel_size` (`[z, y, x]`); infinity when there is no feature at all. Exact (separable
/// lower-envelope algorithm).
pub fn distance_transform(feature: &[bool], shape: [usize; 3], voxel_size: [f64; 3]) -> Vec<f64> {
    let mut sq: Vec<f64> = feature
        .iter()
        .map(|&b| if b { 0.0 } else { f64::INFINITY })
        .collect();
    let st = strides(shape);
    for axis in 0..3 {
        let n = shape[axis];
        if n == 0 {
            return sq;
        }
        let w2 = voxel_size[axis] * voxel_size[axis];
        let others: Vec<usize> = (0..3).filter(|&a| a != axis).collect();
        let (mut f, mut d) = (vec![0f64; n], vec![0f64; n]);
        let (mut v, mut z) = (vec![0usize; n], vec![0f64; n + 1]);
        for i in 0..shape[others[0]] {
            for j in 0..shape[others[1]] {
                let base = i * st[others[0]] + j * st[others[1]];
                for (k, x) in f.iter_mut().enumerate() {
                    *x = sq[base + k * st[axis]];
                }
                edt_line(&f, w2, &mut d, &mut v, &mut z);
                for (k, &x) in d.iter().enumerate() {
                    sq[base + k * st[axis]] = x;
                }
            }
        }
    }
    sq.iter_mut().for_each(|x| *x = libm::sqrt(*x));
    sq
}

/// The 32-bit Mersenne Twister with numpy's legacy `RandomState` seeding and `random_sample`.
#[derive(Clone)]
pub struct Mt19937 {
    mt: [u32; 624],
    i: usize,
}

impl Mt19937 {
    /// `init_genrand(seed)`, what `np.random.seed(seed)` does for an integer seed.
    pub fn new(seed: u32) -> Self {
        let mut mt = [0u32; 624];
        mt[0] = seed;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        Self { mt, i: 624 }
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.i >= 624 {
            for k in 0..624 {
                let y = (self.mt[k] & 0x8000_0000) | (self.mt[(k + 1) % 624] & 0x7fff_ffff);
                let mut x = self.mt[(k + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    x ^= 0x9908_b0df;
                }
                self.mt[k] = x;
            }
            self.i = 0;
        }
        let mut y = self.mt[self.i];
        self.i += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// numpy's `random_sample()`: a double in [0, 1) from 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }
}

/// Sliding maximum over `[i - r, i + r]` (clipped to the line) along `axis`, in place (one line
/// copied aside at a time).
fn max_filter_axis(v: &mut [f64], shape: [usize; 3], axis: usize, r: usize) {
    let st = strides(shape);
    let n = shape[axis];
    let others: Vec<usize> = (0..3).filter(|&a| a != axis).collect();
    let mut line = vec![0f64; n];
    for i in 0..shape[others[0]] {
        for j in 0..shape[others[1]] {
            let base = i * st[others[0]] + j * st[others[1]];
            for (k, l) in line.iter_mut().enumerate() {
                *l = v[base + k * st[axis]];
            }
            for q in 0..n {
                let lo = q.saturating_sub(r);
                let hi = (q + r + 1).min(n);
                v[base + q * st[axis]] = line[lo..hi]
                    .iter()
                    .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            }
        }
    }
}

/// Local maxima of `v` (`[z, y, x]` of `shape`): voxels equal to the maximum of the cube of
/// half-size `min_distance` around them (clipped at the volume border), strictly above
/// `threshold`, and at least `min_distance` from every border (skimage's `peak_local_max` with
/// `exclude_border`). Returned in `[z, y, x]` lexicographic order.
///
/// Memory: the maxima over y and x of the `2 min_distance + 1` planes around the current one, not
/// a filtered copy of the volume (the maximum of a cube does not depend on the order of the axes).
pub fn local_maxima(
    v: &[f64],
    shape: [usize; 3],
    min_distance: usize,
    threshold: f64,
) -> Vec<[usize; 3]> {
    let md = min_distance;
    let (plane, window) = (shape[1] * shape[2], 2 * md + 1);
    let mut out = Vec::new();
    if shape[0] < window {
        return out;
    }
    // Plane z, filtered along y and x, lives in slot z % window.
    let mut ring = vec![0f64; window * plane];
    let filtered = |z: usize, slot: &mut [f64]| {
        slot.copy_from_slice(&v[z * plane..][..plane]);
        for axis in [1, 2] {
            max_filter_axis(slot, [1, shape[1], shape[2]], axis, md);
        }
    };
    for z in 0..2 * md {
        filtered(z, &mut ring[(z % window) * plane..][..plane]);
    }
    let mut m = vec![0f64; plane];
    for z in md..shape[0] - md {
        let newest = z + md;
        filtered(newest, &mut ring[(newest % window) * plane..][..plane]);
        m.copy_from_slice(&ring[..plane]);
        for slot in ring.chunks_exact(plane).skip(1) {
            m.iter_mut().zip(slot).for_each(|(m, s)| *m = m.max(*s));
        }
        for y in md..shape[1].saturating_sub(md) {
            for x in md..shape[2].saturating_sub(md) {
                let (i, j) = (y * shape[2] + x, (z * shape[1] + y) * shape[2] + x);
                if v[j] == m[i] && v[j] > threshold {
                    out.push([z, y, x]);
                }
            }
        }
    }
    out
}

/// google/ffn's `PolicyPeaks` on a normalised image (see the module docs); raw 8-bit voxels give the
/// seeds of their normalised copy without one being made.
pub fn policy_peaks<'a>(
    image: impl Into<CanvasImage<'a>>,
    shape: [usize; 3],
    opts: &PeaksOptions,
) -> Vec<[usize; 3]> {
    let edges = sobel_magnitude(image, shape);
    let thresh = gaussian_blur(&edges, shape, opts.sigma);
    let is_edge: Vec<bool> = edges.iter().zip(&thresh).map(|(e, t)| e > t).collect();
    drop((edges, thresh));
    let mut noisy = distance_transform(&is_edge, shape, opts.voxel_size);
    drop(is_edge);
    let mut rng = Mt19937::new(opts.noise_seed);
    // scipy returns float64 distances; google/ffn casts them to float32 before adding the noise
    // (here in place: one f64 buffer holds the distances, then the noisy values).
    for d in &mut noisy {
        *d = (*d as f32) as f64 + rng.next_f64() * opts.noise_amplitude;
    }
    local_maxima(&noisy, shape, opts.min_distance, 0.0)
}

/// google/ffn's `PolicyGrid3d`: for each offset in turn, the points `offset + k * step` along z, y
/// and x (x fastest).
pub fn policy_grid(shape: [usize; 3], step: usize, offsets: &[usize]) -> Vec<[usize; 3]> {
    let step = step.max(1);
    let mut out = Vec::new();
    for &o in offsets {
        for z in (o..shape[0]).step_by(step) {
            for y in (o..shape[1]).step_by(step) {
                for x in (o..shape[2]).step_by(step) {
                    out.push([z, y, x]);
                }
            }
        }
    }
    out
}

/// The default offsets of [`policy_grid`]: 0, 8, 4, 12, 2, 10, 14.
pub const GRID_OFFSETS: [usize; 7] = [0, 8, 4, 12, 2, 10, 14];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn random_volume(shape: [usize; 3], seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..shape.iter().product::<usize>())
            .map(|_| (r.next_f64() * 4.0 - 2.0) as f32)
            .collect()
    }

    /// Direct 3D correlation with a separable kernel, reflect mode, all in f64 (reference).
    fn direct_separable(input: &[f32], shape: [usize; 3], k: [&[f64]; 3]) -> Vec<f64> {
        let r = [k[0].len() / 2, k[1].len() / 2, k[2].len() / 2];
        let mut out = vec![0f64; input.len()];
        for z in 0..shape[0] {
            for y in 0..shape[1] {
                for x in 0..shape[2] {
                    let mut acc = 0.0;
                    for (a, wa) in k[0].iter().enumerate() {
                        let zz = reflect(z as i64 + a as i64 - r[0] as i64, shape[0]);
                        for (b, wb) in k[1].iter().enumerate() {
                            let yy = reflect(y as i64 + b as i64 - r[1] as i64, shape[1]);
                            for (c, wc) in k[2].iter().enumerate() {
                                let xx = reflect(x as i64 + c as i64 - r[2] as i64, shape[2]);
                                acc += wa
                                    * wb
                                    * wc
                                    * input[(zz * shape[1] + yy) * shape[2] + xx] as f64;
                            }
                        }
                    }
                    out[(z * shape[1] + y) * shape[2] + x] = acc;
                }
            }
        }
        out
    }

    #[test]
    fn reflect_matches_scipy_convention() {
        let idx: Vec<usize> = (-4..8).map(|i| reflect(i, 3)).collect();
        // c b a | a b c | c b a with n = 3, from i = -4.
        assert_eq!(idx, vec![2, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0, 1]);
        assert_eq!(reflect(-3, 1), 0);
    }

    #[test]
    fn gaussian_matches_direct_reference() {
        for shape in [[5, 6, 7], [1, 4, 3], [9, 2, 11]] {
            let img = random_volume(shape, 3);
            let w = gaussian_kernel(1.3);
            assert_eq!(w.len(), 11);
            assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            let fast = gaussian_blur(&img, shape, 1.3);
            let slow = direct_separable(&img, shape, [&w, &w, &w]);
            for (a, b) in fast.iter().zip(&slow) {
                assert!((*a as f64 - b).abs() < 1e-5, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn sobel_matches_direct_reference() {
        let shape = [6, 5, 7];
        let img = random_volume(shape, 4);
        let d: &[f64] = &[-1.0, 0.0, 1.0];
        let s: &[f64] = &[1.0, 2.0, 1.0];
        let gz = direct_separable(&img, shape, [d, s, s]);
        let gy = direct_separable(&img, shape, [s, d, s]);
        let gx = direct_separable(&img, shape, [s, s, d]);
        let fast = sobel_magnitude(&img, shape);
        for i in 0..img.len() {
            let m = (gz[i] * gz[i] + gy[i] * gy[i] + gx[i] * gx[i]).sqrt();
            assert!(
                (fast[i] as f64 - m).abs() < 1e-4 * (1.0 + m),
                "{} vs {m}",
                fast[i]
            );
        }
    }

    #[test]
    fn distance_transform_matches_brute_force() {
        let mut r = Rng::new(9);
        for (shape, vs) in [
            ([7, 8, 9], [1.0, 1.0, 1.0]),
            ([5, 9, 6], [2.5, 1.0, 0.7]),
            ([1, 1, 12], [1.0; 3]),
        ] {
            let n: usize = shape.iter().product();
            let feat: Vec<bool> = (0..n).map(|_| r.next_f64() < 0.05).collect();
            if !feat.iter().any(|&b| b) {
                continue;
            }
            let fast = distance_transform(&feat, shape, vs);
            for z in 0..shape[0] {
                for y in 0..shape[1] {
                    for x in 0..shape[2] {
                        let mut best = f64::INFINITY;
                        for (j, &f) in feat.iter().enumerate() {
                            if f {
                                let (fz, fy, fx) = (
                                    j / (shape[1] * shape[2]),
                                    j / shape[2] % shape[1],
                                    j % shape[2],
                                );
                                let d = [
                                    z as f64 - fz as f64,
                                    y as f64 - fy as f64,
                                    x as f64 - fx as f64,
                                ];
                                best = best.min(
                                    ((d[0] * vs[0]).powi(2)
                                        + (d[1] * vs[1]).powi(2)
                                        + (d[2] * vs[2]).powi(2))
                                    .sqrt(),
                                );
                            }
                        }
                        let i = (z * shape[1] + y) * shape[2] + x;
                        assert!(
                            (fast[i] - best).abs() < 1e-9,
                            "{shape:?} {vs:?} at {z},{y},{x}: {} vs {best}",
                            fast[i]
                        );
                    }
                }
            }
        }
        let none = distance_transform(&[false; 8], [2, 2, 2], [1.0; 3]);
        assert!(none.iter().all(|d| d.is_infinite()));
    }

    #[test]
    fn mersenne_twister_matches_numpy() {
        // numpy: np.random.seed(42); np.random.random(3) ->
        // [0.3745401188473625, 0.9507143064099162, 0.7319939418114051]
        let mut m = Mt19937::new(42);
        assert_eq!(m.next_f64(), 0.3745401188473625);
        assert_eq!(m.next_f64(), 0.9507143064099162);
        assert_eq!(m.next_f64(), 0.7319939418114051);
        // init_genrand(5489) is the reference MT19937; its first output is 3499211612.
        assert_eq!(Mt19937::new(5489).next_u32(), 3_499_211_612);
    }

    #[test]
    fn local_maxima_match_brute_force() {
        let shape = [12, 13, 14];
        let mut r = Rng::new(11);
        let v: Vec<f64> = (0..shape.iter().product::<usize>())
            .map(|_| r.next_f64())
            .collect();
        let fast = local_maxima(&v, shape, 2, 0.0);
        let mut slow = Vec::new();
        for z in 2..shape[0] - 2 {
            for y in 2..shape[1] - 2 {
                for x in 2..shape[2] - 2 {
                    let c = v[(z * shape[1] + y) * shape[2] + x];
                    let mut ok = true;
                    for zz in z.saturating_sub(2)..(z + 3).min(shape[0]) {
                        for yy in y.saturating_sub(2)..(y + 3).min(shape[1]) {
                            for xx in x.saturating_sub(2)..(x + 3).min(shape[2]) {
                                ok &= v[(zz * shape[1] + yy) * shape[2] + xx] <= c;
                            }
                        }
                    }
                    if ok {
                        slow.push([z, y, x]);
                    }
                }
            }
        }
        assert!(!slow.is_empty());
        assert_eq!(fast, slow);
    }

    #[test]
    fn peaks_lie_inside_cells_away_from_membranes() {
        // Two closed cells: dark membrane planes at z = 4, 20; y = 4, 20; x = 4, 16, 28.
        let shape = [24, 24, 33];
        let planes = [vec![4usize, 20], vec![4, 20], vec![4, 16, 28]];
        let mut img = vec![1.0f32; shape.iter().product()];
        for z in 0..shape[0] {
            for y in 0..shape[1] {
                for x in 0..shape[2] {
                    if planes[0].contains(&z) || planes[1].contains(&y) || planes[2].contains(&x) {
                        img[(z * shape[1] + y) * shape[2] + x] = -2.0;
                    }
                }
            }
        }
        let seeds = policy_peaks(&img, shape, &PeaksOptions::default());
        let inside = |s: &[usize; 3], x0: usize, x1: usize| {
            (5..20).contains(&s[0]) && (5..20).contains(&s[1]) && (x0..x1).contains(&s[2])
        };
        assert!(seeds.iter().any(|s| inside(s, 5, 16)), "{seeds:?}");
        assert!(seeds.iter().any(|s| inside(s, 17, 28)), "{seeds:?}");
        for s in &seeds {
            for a in 0..3 {
                assert!(
                    planes[a].iter().all(|&p| s[a].abs_diff(p) >= 2),
                    "seed {s:?} on a membrane"
                );
            }
        }
        // Sorted lexicographically.
        assert!(seeds.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn grid_order() {
        let g = policy_grid([20, 20, 20], 16, &[0, 8]);
        assert_eq!(&g[..3], &[[0, 0, 0], [0, 0, 16], [0, 16, 0]]);
        assert_eq!(g.len(), 8 + 1);
        assert_eq!(g[8], [8, 8, 8]);
    }
}
