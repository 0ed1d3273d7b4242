//! 8-bit grayscale TIFF images through the `tiff` crate: every page (image file directory) of a file
//! in order, for image stacks (one page per file, or a multi-page file holding many z slices).
//! Uncompressed, LZW, Deflate and PackBits pages are read; anything else is an error naming the file
//! and the page.

use crate::error::IoError;
use std::fs;
use std::io::BufReader;
use std::path::Path;
use tiff::ColorType;
use tiff::decoder::{Decoder, DecodingResult, Limits};

/// Largest expansion of compressed TIFF data accepted: LZW with 12-bit codes expands at most about
/// 3,600:1 and Deflate about 1,032:1, so a header declaring more pixels than that is refused before
/// any buffer is allocated.
const MAX_EXPANSION: u64 = 4096;

/// Calls `page(width, height, pixels)` for every page of the TIFF file `path`, first to last, with
/// row-major 8-bit pixels. Pages must be 8-bit grayscale.
pub fn for_each_page(
    path: &Path,
    page: &mut dyn FnMut(u32, u32, Vec<u8>) -> Result<(), IoError>,
) -> Result<(), IoError> {
    let bad = |index: usize, reason: String| IoError::Image {
        path: path.into(),
        reason: if index == 0 {
            reason
        } else {
            format!("page {index}: {reason}")
        },
    };
    let file = fs::File::open(path).map_err(|e| IoError::os(path, e))?;
    let file_len = file.metadata().map_err(|e| IoError::os(path, e))?.len();
    let mut decoder = Decoder::new(BufReader::new(file))
        .map_err(|e| bad(0, format!("not a readable TIFF: {e}")))?;
    let mut index = 0;
    loop {
        let (w, h) = decoder
            .dimensions()
            .map_err(|e| bad(index, format!("not a readable TIFF: {e}")))?;
        let pixels = u64::from(w) * u64::from(h);
        if pixels > file_len.saturating_mul(MAX_EXPANSION) {
            return Err(bad(
                index,
                format!("declares {w} x {h} pixels, more than its {file_len} bytes can hold"),
            ));
        }
        crate::memory::check_allocation("the TIFF page", Some(pixels))
            .map_err(|r| bad(index, r))?;
        match decoder.colortype() {
            Ok(ColorType::Gray(8)) => {}
            Ok(other) => {
                return Err(bad(
                    index,
                    format!("expected an 8-bit grayscale TIFF, found {other:?}"),
                ));
            }
            Err(e) => return Err(bad(index, format!("not a readable TIFF: {e}"))),
        }
        let limit = usize::try_from(pixels).unwrap_or(usize::MAX);
        // The page's own size (checked above) for the decoded image; the crate's bounded default
        // for its intermediate buffers.
        let mut limits = Limits::default();
        limits.decoding_buffer_size = limit;
        decoder = decoder.with_limits(limits);
        let data = match decoder.read_image() {
            Ok(DecodingResult::U8(data)) if data.len() as u64 == pixels => data,
            Ok(_) => {
                return Err(bad(
                    index,
                    "expected one 8-bit sample per pixel".to_string(),
                ));
            }
            Err(e) => return Err(bad(index, format!("not a readable TIFF: {e}"))),
        };
        page(w, h, data)?;
        if !decoder.more_images() {
            return Ok(());
        }
        index += 1;
        decoder
            .next_image()
            .map_err(|e| bad(index, format!("not a readable TIFF: {e}")))?;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tiff::encoder::{TiffEncoder, colortype};

    /// Writes `pages` 8-bit grayscale pages of `w` x `h`, page p's pixel (x, y) = fill(p, x, y).
    pub(crate) fn write_tiff(
        path: &Path,
        w: u32,
        h: u32,
        pages: u32,
        fill: impl Fn(u32, u32, u32) -> u8,
    ) {
        let file = fs::File::create(path).unwrap();
        let mut enc = TiffEncoder::new(std::io::BufWriter::new(file)).unwrap();
        for p in 0..pages {
            let data: Vec<u8> = (0..h)
                .flat_map(|y| (0..w).map(move |x| (x, y)))
                .map(|(x, y)| fill(p, x, y))
                .collect();
            enc.write_image::<colortype::Gray8>(w, h, &data).unwrap();
        }
    }

    fn pages_of(path: &Path) -> Result<Vec<(u32, u32, Vec<u8>)>, IoError> {
        let mut pages = Vec::new();
        for_each_page(path, &mut |w, h, d| {
            pages.push((w, h, d));
            Ok(())
        })?;
        Ok(pages)
    }

    #[test]
    fn every_page_is_read_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stack.tif");
        write_tiff(&path, 5, 3, 4, |p, x, y| (p * 50 + y * 10 + x) as u8);
        let pages = pages_of(&path).unwrap();
        assert_eq!(pages.len(), 4);
        for (p, (w, h, d)) in pages.iter().enumerate() {
            assert_eq!((*w, *h), (5, 3));
            assert_eq!(d[2 * 5 + 4], (p * 50 + 24) as u8);
        }
    }

    #[test]
    fn lzw_deflate_and_packbits_pages_read_back_exactly() {
        use tiff::encoder::{Compression, DeflateLevel};
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..64u32 * 48).map(|i| (i % 251) as u8 / 3).collect();
        for (name, c) in [
            ("lzw", Compression::Lzw),
            ("deflate", Compression::Deflate(DeflateLevel::Balanced)),
            ("packbits", Compression::Packbits),
        ] {
            let path = dir.path().join(format!("{name}.tif"));
            let file = fs::File::create(&path).unwrap();
            TiffEncoder::new(file)
                .unwrap()
                .with_compression(c)
                .write_image::<colortype::Gray8>(64, 48, &data)
                .unwrap();
            let pages = pages_of(&path).unwrap();
            assert_eq!(pages, [(64, 48, data.clone())], "{name}");
        }
    }

    #[test]
    fn other_pixel_types_and_damaged_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let rgb = dir.path().join("rgb.tif");
        let file = fs::File::create(&rgb).unwrap();
        TiffEncoder::new(file)
            .unwrap()
            .write_image::<colortype::RGB8>(2, 2, &[0u8; 12])
            .unwrap();
        let e = pages_of(&rgb).unwrap_err().to_string();
        assert!(
            e.contains("rgb.tif") && e.contains("expected an 8-bit grayscale TIFF, found RGB(8)"),
            "{e}"
        );
        let wide = dir.path().join("g16.tif");
        let file = fs::File::create(&wide).unwrap();
        TiffEncoder::new(file)
            .unwrap()
            .write_image::<colortype::Gray16>(2, 2, &[0u16; 4])
            .unwrap();
        let e = pages_of(&wide).unwrap_err().to_string();
        assert!(e.contains("found Gray(16)"), "{e}");
        let cut = dir.path().join("cut.tif");
        write_tiff(&cut, 64, 64, 2, |_, x, y| (x ^ y) as u8);
        let bytes = fs::read(&cut).unwrap();
        fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
        let e = pages_of(&cut).unwrap_err().to_string();
        assert!(
            e.contains("cut.tif") && e.contains("not a readable TIFF"),
            "{e}"
        );
        fs::write(&cut, b"II*\0garbage").unwrap();
        let e = pages_of(&cut).unwrap_err().to_string();
        assert!(e.contains("cut.tif: not a readable TIFF"), "{e}");
    }

    #[test]
    fn a_header_declaring_more_pixels_than_the_file_holds_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.tif");
        write_tiff(&path, 4, 4, 1, |_, _, _| 7);
        let mut bytes = fs::read(&path).unwrap();
        // Rewrite the ImageWidth (256) and ImageLength (257) entries of the first directory.
        let ifd = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        let entries = u16::from_le_bytes(bytes[ifd..ifd + 2].try_into().unwrap()) as usize;
        for e in 0..entries {
            let at = ifd + 2 + 12 * e;
            let tag = u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap());
            if tag == 256 || tag == 257 {
                bytes[at + 2..at + 4].copy_from_slice(&4u16.to_le_bytes()); // LONG
                bytes[at + 8..at + 12].copy_from_slice(&100_000u32.to_le_bytes());
            }
        }
        fs::write(&path, &bytes).unwrap();
        let e = pages_of(&path).unwrap_err().to_string();
        assert!(
            e.contains("huge.tif") && e.contains("declares 100000 x 100000 pixels"),
            "{e}"
        );
    }
}
