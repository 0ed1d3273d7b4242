//! Coloured segmentation slices over grey image slices, as RGB bytes (the picture behind
//! `ffn view`).
//!
//! Every segment gets a fixed bright colour derived from its id ([`segment_colour`]); background (0)
//! shows the grey image unchanged. Inside a segment the colour is blended with the grey value by
//! `alpha`; pixels on a segment's boundary (a 4-neighbour with another id) are drawn in full colour
//! so that neighbouring segments of similar colours stay apart.

use super::SegmentationError;
use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

/// A colour for segment `id` (black for 0): a hash of the id mapped to bright, saturated values,
/// the same in every picture.
pub fn segment_colour(id: u64) -> [u8; 3] {
    if id == 0 {
        return [0, 0, 0];
    }
    // splitmix64 finaliser: neighbouring ids get unrelated colours.
    let mut h = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    // Hue from the hash, full saturation, value 0.85..1.
    let hue = (h % 360) as f32;
    let value = 0.85 + ((h >> 16) % 16) as f32 / 100.0;
    let c = value;
    let x = c * (1.0 - libm::fabsf((hue / 60.0) % 2.0 - 1.0));
    let (r, g, b) = match (hue / 60.0) as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    [r, g, b].map(|v| (v * 255.0 + 0.5) as u8)
}

/// Renders a `height x width` slice (row-major) of `labels` over the grey `image` with opacity
/// `alpha` in `[0, 1]`; returns `height * width * 3` RGB bytes.
pub fn render_overlay(
    image: &[u8],
    labels: &[u64],
    width: usize,
    height: usize,
    alpha: f32,
) -> Result<Vec<u8>, SegmentationError> {
    let n = width * height;
    for (what, len) in [("image slice", image.len()), ("label slice", labels.len())] {
        if len != n {
            return Err(SegmentationError::LengthMismatch {
                what: format!("{what} of {height} x {width} pixels"),
                expected: n,
                actual: len,
            });
        }
    }
    if !(0.0..=1.0).contains(&alpha) {
        return Err(SegmentationError::InvalidParameter {
            field: "alpha",
            reason: format!("expected an opacity in [0, 1], found {alpha}"),
        });
    }
    let mut out = Vec::with_capacity(3 * n);
    for y in 0..height {
        for x in 0..width {
            let i = y * width + x;
            let (g, id) = (image[i] as f32, labels[i]);
            if id == 0 {
                out.extend_from_slice(&[image[i]; 3]);
                continue;
            }
            let differs = |j: usize| labels[j] != id;
            let boundary = (x > 0 && differs(i - 1))
                || (x + 1 < width && differs(i + 1))
                || (y > 0 && differs(i - width))
                || (y + 1 < height && differs(i + width));
            let a = if boundary { 1.0 } else { alpha };
            let c = segment_colour(id);
            out.extend(
                c.iter()
                    .map(|&c| (a * c as f32 + (1.0 - a) * g + 0.5).min(255.0) as u8),
            );
        }
    }
    Ok(out)
}

/// Scales a `height x width` RGB picture (row-major, 3 bytes a pixel) up by `zoom` (nearest
/// neighbour; 0 counts as 1); returns `height * zoom * width * zoom * 3` bytes.
pub fn zoom_rgb(rgb: &[u8], width: usize, height: usize, zoom: usize) -> Vec<u8> {
    let zoom = zoom.max(1);
    let (w, h) = (width * zoom, height * zoom);
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let i = ((y / zoom) * width + x / zoom) * 3;
            out.extend_from_slice(&rgb[i..i + 3]);
        }
    }
    out
}

/// Panels side by side, each `height x width` scaled by `zoom` and `gap` white pixels apart: the
/// grey slice itself, then every labelling of `labels` drawn over it by [`render_overlay`] with
/// opacity `alpha`. Returns the RGB bytes and the picture's width and height.
pub fn overlay_panels(
    grey: &[u8],
    labels: &[&[u64]],
    width: usize,
    height: usize,
    alpha: f32,
    zoom: usize,
    gap: usize,
) -> Result<(Vec<u8>, usize, usize), SegmentationError> {
    let zoom = zoom.max(1);
    let mut panels = Vec::with_capacity(1 + labels.len());
    panels.push(render_overlay(
        grey,
        &vec![0; grey.len()],
        width,
        height,
        alpha,
    )?);
    for l in labels {
        panels.push(render_overlay(grey, l, width, height, alpha)?);
    }
    let (pw, ph) = (width * zoom, height * zoom);
    let n = panels.len();
    let total_w = n * pw + (n - 1) * gap;
    let mut out = vec![255u8; total_w * ph * 3];
    for (p, rgb) in panels.iter().enumerate() {
        let big = zoom_rgb(rgb, width, height, zoom);
        for y in 0..ph {
            let dst = (y * total_w + p * (pw + gap)) * 3;
            out[dst..dst + pw * 3].copy_from_slice(&big[y * pw * 3..(y + 1) * pw * 3]);
        }
    }
    Ok((out, total_w, ph))
}

/// Maps any image values to grey levels: `(v - lo) / (hi - lo) * 255` over the slice's own range
/// (a constant slice becomes mid-grey). Non-finite values are an error.
pub fn to_grey(values: &[f32]) -> Result<Vec<u8>, SegmentationError> {
    let mut lo = f32::INFINITY;
    let mut hi = f32::NEG_INFINITY;
    for &v in values {
        if !v.is_finite() {
            return Err(SegmentationError::InvalidParameter {
                field: "image",
                reason: "non-finite value in the slice".to_string(),
            });
        }
        lo = lo.min(v);
        hi = hi.max(v);
    }
    Ok(values
        .iter()
        .map(|&v| {
            if hi > lo {
                ((v - lo) / (hi - lo) * 255.0 + 0.5) as u8
            } else {
                128
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_is_grey_interiors_are_blended_boundaries_solid() {
        // 4 x 3: segment 7 fills the left 3 x 3 block, the right column is background.
        let image = vec![100u8; 12];
        let labels = vec![7, 7, 7, 0, 7, 7, 7, 0, 7, 7, 7, 0];
        let rgb = render_overlay(&image, &labels, 4, 3, 0.5).unwrap();
        assert_eq!(rgb.len(), 36);
        let px = |x: usize, y: usize| [0, 1, 2].map(|k| rgb[(y * 4 + x) * 3 + k]);
        let c = segment_colour(7);
        assert_eq!(px(3, 1), [100, 100, 100]);
        // (2, 1) touches the background: full colour. (1, 1) is interior: half and half.
        assert_eq!(px(2, 1), c);
        assert_eq!(px(1, 1), c.map(|v| ((v as f32 + 100.0) / 2.0 + 0.5) as u8));
    }

    #[test]
    fn colours_are_bright_distinct_and_stable() {
        assert_eq!(segment_colour(0), [0, 0, 0]);
        let cs: Vec<[u8; 3]> = (1..=50).map(segment_colour).collect();
        for c in &cs {
            assert!(c.iter().copied().max().unwrap_or(0) >= 200, "{c:?}");
        }
        let mut distinct = cs.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() >= 45);
        assert_eq!(segment_colour(12345), segment_colour(12345));
    }

    #[test]
    fn bad_sizes_and_alpha_are_errors() {
        assert!(matches!(
            render_overlay(&[0; 5], &[0; 6], 3, 2, 0.5),
            Err(SegmentationError::LengthMismatch { .. })
        ));
        assert!(
            render_overlay(&[0; 6], &[0; 6], 3, 2, 1.5)
                .unwrap_err()
                .to_string()
                .starts_with("alpha:")
        );
        assert_eq!(to_grey(&[1.0, 3.0, 2.0]).unwrap(), vec![0, 255, 128]);
        assert_eq!(to_grey(&[5.0, 5.0]).unwrap(), vec![128, 128]);
        assert!(to_grey(&[f32::NAN]).is_err());
    }

    #[test]
    fn panels_show_the_grey_slice_then_each_labelling() {
        // 2 x 1 pixels: grey 10 and 200; one labelling with segment 3 on the right pixel.
        let (rgb, w, h) = overlay_panels(&[10, 200], &[&[0, 3]], 2, 1, 0.5, 2, 1).unwrap();
        assert_eq!((w, h), (2 * 2 + 1 + 2 * 2, 2));
        let px = |x: usize, y: usize| [0, 1, 2].map(|k| rgb[(y * w + x) * 3 + k]);
        assert_eq!(px(1, 1), [10; 3], "grey panel, zoomed");
        assert_eq!(px(2, 0), [200; 3], "grey panel, right pixel");
        assert_eq!(px(4, 0), [255; 3], "white gap");
        assert_eq!(px(5, 0), [10; 3], "background shows the grey image");
        assert_eq!(
            px(7, 1),
            segment_colour(3),
            "a one-pixel segment is all boundary"
        );
        assert!(overlay_panels(&[0; 2], &[&[0; 3]], 2, 1, 0.5, 1, 0).is_err());
    }
}
