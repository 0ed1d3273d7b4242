//! Activation layout of the engine.
//!
//! Activations are channels-last, contiguous `f32`: `[batch, z, y, x, channels]`, row-major, with
//! runtime sizes. Inside the network every volume additionally carries a border of zeros (`pad`
//! voxels on each side of z, y and x), so that a SAME convolution reads its neighbours without bounds
//! checks and the taps `(dz, dy, *)` of a 3x3x3 kernel become one strided matrix (see
//! [`crate::conv`]). [`Padded`] describes such a buffer and converts to and from the plain layout.

/// Geometry of a zero-padded channels-last buffer `[batch, z + 2 pad, y + 2 pad, x + 2 pad, channels]`.
///
/// The number of channels is not part of the geometry: one geometry serves buffers of any width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Padded {
    /// Number of volumes.
    pub batch: usize,
    /// Interior size `[z, y, x]` (without the border).
    pub size: [usize; 3],
    /// Border width on every side.
    pub pad: usize,
}

impl Padded {
    /// A geometry of `batch` volumes of interior `size` with a border of `pad`.
    pub fn new(batch: usize, size: [usize; 3], pad: usize) -> Self {
        Self { batch, size, pad }
    }

    /// Padded extent `[z, y, x]` of one volume.
    pub fn dims(&self) -> [usize; 3] {
        self.size.map(|s| s + 2 * self.pad)
    }

    /// Voxels of one padded plane (`y * x` with borders).
    pub fn plane_voxels(&self) -> usize {
        let [_, y, x] = self.dims();
        y * x
    }

    /// Voxels of one padded volume.
    pub fn volume_voxels(&self) -> usize {
        let [z, y, x] = self.dims();
        z * y * x
    }

    /// Voxels of the whole padded buffer (all volumes).
    pub fn voxels(&self) -> usize {
        self.batch * self.volume_voxels()
    }

    /// Interior voxels (all volumes), i.e. the voxels of the plain layout.
    pub fn interior_voxels(&self) -> usize {
        self.batch * self.size.iter().product::<usize>()
    }

    /// Buffer length for `channels` channels.
    pub fn len(&self, channels: usize) -> usize {
        self.voxels() * channels
    }

    /// True when the buffer holds no voxel.
    pub fn is_empty(&self) -> bool {
        self.voxels() == 0
    }

    /// Voxel index (not multiplied by channels) of interior voxel `(b, z, y, x)`.
    pub fn voxel(&self, b: usize, z: usize, y: usize, x: usize) -> usize {
        let [dz, dy, dx] = self.dims();
        let p = self.pad;
        ((b * dz + z + p) * dy + y + p) * dx + x + p
    }

    /// Copies a plain `[batch, z, y, x, channels]` buffer into the interior of a padded one and
    /// zeroes the border.
    ///
    /// # Panics
    /// When a buffer length does not match the geometry.
    pub fn pad_from(&self, plain: &[f32], channels: usize, padded: &mut [f32]) {
        assert_eq!(
            plain.len(),
            self.interior_voxels() * channels,
            "Padded::pad_from: plain length"
        );
        assert_eq!(
            padded.len(),
            self.len(channels),
            "Padded::pad_from: padded length"
        );
        padded.fill(0.0);
        let row = self.size[2] * channels;
        let mut src = 0;
        for b in 0..self.batch {
            for z in 0..self.size[0] {
                for y in 0..self.size[1] {
                    let dst = self.voxel(b, z, y, 0) * channels;
                    padded[dst..dst + row].copy_from_slice(&plain[src..src + row]);
                    src += row;
                }
            }
        }
    }

    /// Copies the interior of a padded buffer into a plain `[batch, z, y, x, channels]` buffer.
    ///
    /// # Panics
    /// When a buffer length does not match the geometry.
    pub fn unpad_into(&self, padded: &[f32], channels: usize, plain: &mut [f32]) {
        assert_eq!(
            plain.len(),
            self.interior_voxels() * channels,
            "Padded::unpad_into: plain length"
        );
        assert_eq!(
            padded.len(),
            self.len(channels),
            "Padded::unpad_into: padded length"
        );
        let row = self.size[2] * channels;
        let mut dst = 0;
        for b in 0..self.batch {
            for z in 0..self.size[0] {
                for y in 0..self.size[1] {
                    let src = self.voxel(b, z, y, 0) * channels;
                    plain[dst..dst + row].copy_from_slice(&padded[src..src + row]);
                    dst += row;
                }
            }
        }
    }

    /// Sets every border voxel of a padded buffer to zero, leaving the interior untouched.
    ///
    /// # Panics
    /// When the buffer length does not match the geometry.
    pub fn zero_border(&self, padded: &mut [f32], channels: usize) {
        assert_eq!(
            padded.len(),
            self.len(channels),
            "Padded::zero_border: length"
        );
        let plane = self.plane_voxels() * channels;
        if plane == 0 {
            return;
        }
        let [dz, _, _] = self.dims();
        for (i, chunk) in padded.chunks_mut(plane).enumerate() {
            let z = i % dz;
            self.zero_plane_border(chunk, z, channels);
        }
    }

    /// Zeroes the border voxels of one padded plane (`plane` holds `plane_voxels() * channels`
    /// values; `z` is its padded z index within its volume).
    pub(crate) fn zero_plane_border(&self, plane: &mut [f32], z: usize, channels: usize) {
        let p = self.pad;
        let [_, dy, dx] = self.dims();
        if z < p || z >= p + self.size[0] || self.size[1] == 0 || self.size[2] == 0 {
            plane.fill(0.0);
            return;
        }
        // Rows above and below the interior, and the border of each interior row.
        plane[..(p * dx + p) * channels].fill(0.0);
        let end = ((p + self.size[1] - 1) * dx + p + self.size[2]) * channels;
        plane[end..].fill(0.0);
        for y in p..p + self.size[1] - 1 {
            let a = (y * dx + p + self.size[2]) * channels;
            let b = ((y + 1) * dx + p) * channels;
            plane[a..b].fill(0.0);
        }
        debug_assert_eq!(plane.len(), dy * dx * channels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn pad_unpad_round_trip_and_border_is_zero() {
        let g = Padded::new(2, [3, 1, 4], 1);
        let c = 2;
        let plain: Vec<f32> = (0..g.interior_voxels() * c)
            .map(|i| i as f32 + 1.0)
            .collect();
        let mut padded = vec![7.0; g.len(c)];
        g.pad_from(&plain, c, &mut padded);
        let nonzero = padded.iter().filter(|v| **v != 0.0).count();
        assert_eq!(nonzero, plain.len());
        assert_eq!(padded[g.voxel(1, 2, 0, 3) * c + 1], plain[plain.len() - 1]);
        let mut back = vec![0.0; plain.len()];
        g.unpad_into(&padded, c, &mut back);
        assert_eq!(back, plain);
        // Dirty the border, then clean it.
        let mut dirty: Vec<f32> = padded
            .iter()
            .map(|v| if *v == 0.0 { -1.0 } else { *v })
            .collect();
        g.zero_border(&mut dirty, c);
        assert_eq!(dirty, padded);
    }

    #[test]
    fn geometry_numbers() {
        let g = Padded::new(3, [5, 6, 7], 2);
        assert_eq!(g.dims(), [9, 10, 11]);
        assert_eq!(g.voxels(), 3 * 9 * 10 * 11);
        assert_eq!(g.voxel(0, 0, 0, 0), (2 * 10 + 2) * 11 + 2);
        assert_eq!(g.voxel(1, 0, 0, 0), g.volume_voxels() + g.voxel(0, 0, 0, 0));
    }
}
