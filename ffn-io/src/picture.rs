//! Pictures: RGB bytes (from `ffn_core::segmentation::overlay`) written as PNG files.

use std::io::BufWriter;
use std::path::Path;

use crate::error::IoError;

/// Writes `rgb` (`height * width * 3` bytes, row-major) as an 8-bit RGB PNG.
pub fn write_rgb_png(path: &Path, width: usize, height: usize, rgb: &[u8]) -> Result<(), IoError> {
    if rgb.len() != width * height * 3 || width == 0 || height == 0 {
        return Err(IoError::Image {
            path: path.into(),
            reason: format!(
                "cannot write a {width} x {height} picture: expected {} RGB bytes, found {}",
                width * height * 3,
                rgb.len()
            ),
        });
    }
    let png_err = |e: png::EncodingError| IoError::os(path, std::io::Error::other(e));
    crate::atomic::replace_file(path, |tmp| {
        let file = std::fs::File::create(tmp).map_err(|e| IoError::os(tmp, e))?;
        let mut enc = png::Encoder::new(BufWriter::new(file), width as u32, height as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(png_err)?;
        w.write_image_data(rgb).map_err(png_err)?;
        w.finish().map_err(png_err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pngs_round_trip_and_bad_sizes_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.png");
        write_rgb_png(&p, 2, 1, &[1, 2, 3, 4, 5, 6]).unwrap();
        let mut r = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&p).unwrap()))
            .read_info()
            .unwrap();
        let mut px = vec![0; r.output_buffer_size().unwrap()];
        r.next_frame(&mut px).unwrap();
        assert_eq!(px, [1, 2, 3, 4, 5, 6]);
        let e = write_rgb_png(&p, 2, 2, &[0; 6]).unwrap_err().to_string();
        assert!(
            e.contains("a.png") && e.contains("expected 12 RGB bytes, found 6"),
            "{e}"
        );
    }
}
