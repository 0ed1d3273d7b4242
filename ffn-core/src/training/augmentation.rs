//! Data augmentation of training patches: reflections along z, y, x and permutations of the axes
//! (y <-> x always allowed on square sections; z too only for isotropic data).
//!
//! An [`Augmentation`] is drawn once per training example and applied identically to its image and
//! its labels. It is plain data, so it can be saved with the generator state.

use alloc::vec::Vec;

use super::{TrainingError, invalid};
use crate::rng::Rng;

/// Which augmentations are allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AugmentConfig {
    /// Reflect each axis with probability 1/2.
    pub reflect: bool,
    /// Swap y and x with probability 1/2 (needs equal y and x patch sizes).
    pub permute_xy: bool,
    /// Draw any of the 6 axis orders uniformly (needs a cubic patch; isotropic data only).
    /// Supersedes `permute_xy`.
    pub permute_z: bool,
}

impl Default for AugmentConfig {
    /// google/ffn's defaults for anisotropic data: reflections and y<->x.
    fn default() -> Self {
        Self {
            reflect: true,
            permute_xy: true,
            permute_z: false,
        }
    }
}

impl AugmentConfig {
    /// No augmentation.
    pub const NONE: Self = Self {
        reflect: false,
        permute_xy: false,
        permute_z: false,
    };

    /// Checks that the permutations are possible for a patch shape `[z, y, x]`.
    pub fn validate(&self, shape: [usize; 3]) -> Result<(), TrainingError> {
        if self.permute_z && !(shape[0] == shape[1] && shape[1] == shape[2]) {
            return Err(invalid(
                "augment.permute_z",
                "a cubic training patch",
                shape,
            ));
        }
        if self.permute_xy && shape[1] != shape[2] {
            return Err(invalid(
                "augment.permute_xy",
                "equal y and x patch sizes",
                shape,
            ));
        }
        Ok(())
    }

    /// Draws one augmentation.
    pub fn draw(&self, rng: &mut Rng) -> Augmentation {
        let mut flip = [false; 3];
        if self.reflect {
            for f in &mut flip {
                *f = rng.next_u64() & 1 == 1;
            }
        }
        let order = if self.permute_z {
            const ORDERS: [[u8; 3]; 6] = [
                [0, 1, 2],
                [0, 2, 1],
                [1, 0, 2],
                [1, 2, 0],
                [2, 0, 1],
                [2, 1, 0],
            ];
            ORDERS[rng.below(6)]
        } else if self.permute_xy && rng.next_u64() & 1 == 1 {
            [0, 2, 1]
        } else {
            [0, 1, 2]
        };
        Augmentation { flip, order }
    }
}

/// One drawn augmentation: output axis `a` reads source axis `order[a]`, then output axis `a` is
/// reversed when `flip[a]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Augmentation {
    /// Reflect output axis z, y, x.
    pub flip: [bool; 3],
    /// Source axis of each output axis (a permutation of 0, 1, 2).
    pub order: [u8; 3],
}

impl Augmentation {
    /// The identity.
    pub const IDENTITY: Self = Self {
        flip: [false; 3],
        order: [0, 1, 2],
    };

    /// Packs into one integer (for saved states): bits 0-2 flips, then 2 bits per axis of `order`.
    pub fn to_bits(&self) -> u64 {
        let mut b = 0u64;
        for a in 0..3 {
            b |= (self.flip[a] as u64) << a;
            b |= (self.order[a] as u64 & 3) << (3 + 2 * a);
        }
        b
    }

    /// Inverse of [`Augmentation::to_bits`]; `None` unless `order` is a permutation.
    pub fn from_bits(b: u64) -> Option<Self> {
        let flip = [0, 1, 2].map(|a| (b >> a) & 1 == 1);
        let order = [0, 1, 2].map(|a| ((b >> (3 + 2 * a)) & 3) as u8);
        let mut seen = [false; 3];
        for &o in &order {
            if o > 2 || seen[o as usize] {
                return None;
            }
            seen[o as usize] = true;
        }
        (b >> 9 == 0).then_some(Self { flip, order })
    }

    /// Shape of the output for a source shape.
    pub fn output_shape(&self, src: [usize; 3]) -> [usize; 3] {
        self.order.map(|o| src[o as usize])
    }

    /// Applies to a `[z, y, x]` row-major array of shape `src`.
    pub fn apply<T: Copy>(&self, data: &[T], src: [usize; 3]) -> Vec<T> {
        let out_shape = self.output_shape(src);
        let strides = [src[1] * src[2], src[2], 1];
        let mut out = Vec::with_capacity(data.len());
        for i in 0..out_shape[0] {
            for j in 0..out_shape[1] {
                for k in 0..out_shape[2] {
                    let o = [i, j, k];
                    let mut idx = 0;
                    for a in 0..3 {
                        let c = if self.flip[a] {
                            out_shape[a] - 1 - o[a]
                        } else {
                            o[a]
                        };
                        idx += c * strides[self.order[a] as usize];
                    }
                    out.push(data[idx]);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflections_and_swaps_move_voxels_where_expected() {
        let src = [2, 3, 4];
        let data: Vec<usize> = (0..24).collect();
        let at = |z: usize, y: usize, x: usize| (z * 3 + y) * 4 + x;
        assert_eq!(Augmentation::IDENTITY.apply(&data, src), data);
        let fx = Augmentation {
            flip: [false, false, true],
            order: [0, 1, 2],
        };
        let out = fx.apply(&data, src);
        assert_eq!(out[at(1, 2, 0)], at(1, 2, 3));
        let swap = Augmentation {
            flip: [false; 3],
            order: [0, 2, 1],
        };
        let out = swap.apply(&data, src);
        // Output shape [2, 4, 3]: out[z][a][b] = src[z][b][a].
        assert_eq!(out[(4 + 3) * 3 + 2], at(1, 2, 3));
        let fz = Augmentation {
            flip: [true, false, false],
            order: [0, 1, 2],
        };
        assert_eq!(fz.apply(&data, src)[at(0, 1, 1)], at(1, 1, 1));
    }

    #[test]
    fn draws_respect_the_config_and_round_trip() {
        let mut rng = Rng::new(3);
        let mut swaps = 0;
        for _ in 0..400 {
            let a = AugmentConfig::default().draw(&mut rng);
            assert_eq!(a.order[0], 0);
            swaps += (a.order == [0, 2, 1]) as usize;
            assert_eq!(Augmentation::from_bits(a.to_bits()), Some(a));
            let z = AugmentConfig {
                permute_z: true,
                ..Default::default()
            }
            .draw(&mut rng);
            assert_eq!(Augmentation::from_bits(z.to_bits()), Some(z));
        }
        assert!((120..280).contains(&swaps), "{swaps}");
        assert_eq!(AugmentConfig::NONE.draw(&mut rng), Augmentation::IDENTITY);
        assert!(Augmentation::from_bits(0b11_11_11 << 3).is_none());
        assert!(
            AugmentConfig {
                permute_z: true,
                ..Default::default()
            }
            .validate([3, 5, 5])
            .is_err()
        );
        assert!(AugmentConfig::default().validate([3, 5, 5]).is_ok());
    }
}
