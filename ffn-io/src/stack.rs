//! Image stacks: a folder (or a `*`/`?` pattern) of 2D 8-bit grayscale PNG or TIFF slices, sorted
//! by the number in the file name (`iso.2600.png` < `iso.2601.png` < `iso.10000.png`), or one
//! multi-page TIFF, imported into a 3D `uint8` volume with axes z,y,x (y = image row, x = column).
//! Every page of a TIFF file is one z slice, so a folder of multi-page TIFFs (as microscopes write
//! them, a block of slices per file) is read file by file, page by page.

use crate::error::IoError;
use ndarray::Array3;
use std::fs;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// `*` (any run of characters) and `?` (one character) matching of a file name.
fn wildcard_match(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|i| wildcard_match(rest, &name[i..])),
        Some(('?', rest)) => !name.is_empty() && wildcard_match(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && wildcard_match(rest, &name[1..]),
    }
}

/// Whether `name` is a slice file by its extension (`.png`, `.tif`, `.tiff`, any case).
fn is_slice_file(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".png", ".tif", ".tiff"]
        .iter()
        .any(|ext| lower.ends_with(ext))
}

/// Whether `path` is read as a TIFF (by its extension).
fn is_tiff(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("tif") || e.eq_ignore_ascii_case("tiff"))
}

/// The number that orders a slice: the last run of digits in the file name (without extension).
fn slice_number(path: &Path) -> Option<u64> {
    let stem = path.file_stem()?.to_str()?;
    let end = stem.rfind(|c: char| c.is_ascii_digit())? + 1;
    let start = stem[..end]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    stem[start..end].parse().ok()
}

/// The slice files of `source`, in z order. `source` is a folder (all its `.png`, `.tif` and `.tiff`
/// files), a pattern whose file-name part may hold `*` and `?` (e.g. `maps/iso.*.png`), or one
/// (multi-page) TIFF file. With two or more files every file must carry a number in its name, and no
/// two the same one.
pub fn find_slices(source: &str) -> Result<Vec<PathBuf>, IoError> {
    let err = |reason: String| IoError::Stack {
        source_desc: source.to_string(),
        reason,
    };
    let src = Path::new(source);
    let (dir, pattern): (PathBuf, Vec<char>) = if src.is_dir() {
        (src.to_path_buf(), "*".chars().collect())
    } else if src.is_file() && is_tiff(src) {
        return Ok(vec![src.to_path_buf()]);
    } else {
        let name = src
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| err("no file name or pattern".into()))?;
        if !name.contains(['*', '?']) {
            return Err(if src.exists() {
                err("expected a folder of PNG or TIFF slices, a pattern such as 'dir/*.png' or one multi-page TIFF, found a single file that is not a TIFF".into())
            } else {
                IoError::NotFound {
                    path: src.to_path_buf(),
                }
            });
        }
        let parent = src
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (parent.to_path_buf(), name.chars().collect())
    };
    let entries = fs::read_dir(&dir).map_err(|e| IoError::os(&dir, e))?;
    let mut found: Vec<(Option<u64>, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| IoError::os(&dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let chars: Vec<char> = name.chars().collect();
        if !wildcard_match(&pattern, &chars) || !entry.path().is_file() || !is_slice_file(name) {
            continue;
        }
        let path = entry.path();
        found.push((slice_number(&path), path));
    }
    match found.as_slice() {
        [] => return Err(err("no PNG or TIFF slices found".into())),
        [(_, one)] => return Ok(vec![one.clone()]),
        _ => {}
    }
    if let Some((_, path)) = found.iter().find(|(n, _)| n.is_none()) {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        return Err(err(format!(
            "slice '{name}' has no number in its name to order it by"
        )));
    }
    found.sort();
    if let Some(w) = found.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(err(format!(
            "slices {} and {} carry the same number {}",
            w[0].1.display(),
            w[1].1.display(),
            w[0].0.unwrap_or_default()
        )));
    }
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Calls `slice(width, height, pixels)` for every z slice of the file `path`: its one image for a
/// PNG, every page for a TIFF.
fn for_each_slice(
    path: &Path,
    slice: &mut dyn FnMut(u32, u32, Vec<u8>) -> Result<(), IoError>,
) -> Result<(), IoError> {
    if is_tiff(path) {
        crate::tiff_pages::for_each_page(path, slice)
    } else {
        let (w, h, pixels) = read_png_slice(path)?;
        slice(w, h, pixels)
    }
}

/// Largest expansion of deflate-compressed data (deflate's limit is about 1032:1), with headroom.
const DEFLATE_MAX_RATIO: u64 = 1100;

/// Decodes one 8-bit (or lower bit depth) grayscale PNG: `(width, height, row-major pixels)`.
pub fn read_png_slice(path: &Path) -> Result<(u32, u32, Vec<u8>), IoError> {
    let bad = |reason: String| IoError::Image {
        path: path.into(),
        reason,
    };
    let file = fs::File::open(path).map_err(|e| IoError::os(path, e))?;
    let file_len = file.metadata().map_err(|e| IoError::os(path, e))?.len();
    let mut decoder = png::Decoder::new(BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder
        .read_info()
        .map_err(|e| bad(format!("not a readable PNG: {e}")))?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| bad("image too large".into()))?;
    // Deflate expands at most about 1032:1: a header declaring more pixels than the compressed
    // data can hold is refused before the buffer is allocated.
    let holdable = file_len.saturating_mul(DEFLATE_MAX_RATIO);
    if size as u64 > holdable {
        let (w, h) = (reader.info().width, reader.info().height);
        return Err(bad(format!(
            "declares {w} x {h} pixels ({size} bytes), more than its {file_len} bytes can hold"
        )));
    }
    crate::memory::check_allocation("the slice", Some(size as u64)).map_err(bad)?;
    let mut buf = vec![0u8; size];
    let info = reader
        .next_frame(&mut buf)
        .map_err(|e| bad(format!("not a readable PNG: {e}")))?;
    if info.color_type != png::ColorType::Grayscale || info.bit_depth != png::BitDepth::Eight {
        return Err(bad(format!(
            "expected an 8-bit grayscale PNG, found {:?} with {} bits per sample",
            info.color_type, info.bit_depth as u8
        )));
    }
    let (w, h) = (info.width as usize, info.height as usize);
    let mut pixels = Vec::with_capacity(w * h);
    for row in buf.chunks(info.line_size).take(h) {
        pixels.extend_from_slice(&row[..w]);
    }
    Ok((info.width, info.height, pixels))
}

/// What [`for_each_stack_slice`] calls per slice: `(z, width, height, row-major pixels)`.
pub type SliceVisitor<'a> = dyn FnMut(usize, u32, u32, &[u8]) -> Result<(), IoError> + 'a;

/// Calls `slice(z, width, height, pixels)` for every slice of the files `paths` in order (every
/// page of a TIFF is one slice), checking that each has the size of the first; returns the stack's
/// shape `[z, y, x]`. Only one slice is in memory at a time.
pub fn for_each_stack_slice(
    paths: &[PathBuf],
    slice: &mut SliceVisitor<'_>,
) -> Result<[usize; 3], IoError> {
    let first = paths.first().ok_or_else(|| IoError::Stack {
        source_desc: "image stack".into(),
        reason: "no slices given".into(),
    })?;
    let mut size: Option<(u32, u32)> = None;
    let mut slices = 0usize;
    for path in paths {
        for_each_slice(path, &mut |w, h, pixels| {
            let (ew, eh) = *size.get_or_insert((w, h));
            if (w, h) != (ew, eh) {
                return Err(IoError::SliceSize {
                    path: path.clone(),
                    first: first.clone(),
                    expected_w: ew,
                    expected_h: eh,
                    found_w: w,
                    found_h: h,
                });
            }
            slice(slices, w, h, &pixels)?;
            slices += 1;
            Ok(())
        })?;
    }
    let (w, h) = size.unwrap_or((0, 0));
    Ok([slices, h as usize, w as usize])
}

/// The shape `[z, y, x]` of the stack of `paths`: the number of files and the first one's size
/// for PNG slices; TIFF files are read through to count their pages.
pub fn stack_shape(paths: &[PathBuf]) -> Result<[usize; 3], IoError> {
    if let Some(first) = paths.first().filter(|_| !paths.iter().any(|p| is_tiff(p))) {
        let (w, h, _) = read_png_slice(first)?;
        return Ok([paths.len(), h as usize, w as usize]);
    }
    for_each_stack_slice(paths, &mut |_, _, _, _| Ok(()))
}

/// Reads the slice files (in the given order; every page of a TIFF is one slice) into a volume
/// `[z, y, x]`; every slice must have the size of the first one.
pub fn read_stack(paths: &[PathBuf]) -> Result<Array3<u8>, IoError> {
    let mut data = Vec::new();
    let shape = for_each_stack_slice(paths, &mut |z, w, h, pixels| {
        let bytes = crate::memory::bytes_of(&[z + 1, h as usize, w as usize], 1);
        crate::memory::check_allocation(&format!("the stack of {} slices", z + 1), bytes).map_err(
            |reason| IoError::Stack {
                source_desc: paths[0].display().to_string(),
                reason,
            },
        )?;
        data.extend_from_slice(pixels);
        Ok(())
    })?;
    Array3::from_shape_vec((shape[0], shape[1], shape[2]), data).map_err(|e| IoError::Stack {
        source_desc: paths[0].display().to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_png(
        path: &Path,
        w: u32,
        h: u32,
        color: png::ColorType,
        fill: impl Fn(u32, u32) -> u8,
    ) {
        let file = fs::File::create(path).unwrap();
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
        enc.set_color(color);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().unwrap();
        let channels = if color == png::ColorType::Rgb { 3 } else { 1 };
        let data: Vec<u8> = (0..h)
            .flat_map(|y| (0..w).flat_map(move |x| std::iter::repeat_n((x, y), channels)))
            .map(|(x, y)| fill(x, y))
            .collect();
        writer.write_image_data(&data).unwrap();
    }

    #[test]
    fn numbers_and_patterns() {
        assert_eq!(slice_number(Path::new("d/iso.2600.png")), Some(2600));
        assert_eq!(slice_number(Path::new("s_007_v2.png")), Some(2));
        assert_eq!(slice_number(Path::new("abc.png")), None);
        let m = |p: &str, n: &str| {
            wildcard_match(
                &p.chars().collect::<Vec<_>>(),
                &n.chars().collect::<Vec<_>>(),
            )
        };
        assert!(m("iso.*.png", "iso.12.png") && m("*.png", "a.png") && m("a?c", "abc"));
        assert!(!m("iso.*.png", "isox12.png") && !m("a?c", "ac"));
    }

    #[test]
    fn stack_is_sorted_numerically_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        // z = 9, 10, 100: string order would put 10 and 100 before 9.
        for (z, n) in [(0u8, 9), (1, 10), (2, 100)] {
            write_png(
                &dir.path().join(format!("s.{n}.png")),
                5,
                3,
                png::ColorType::Grayscale,
                |x, y| z * 100 + (y * 10 + x) as u8,
            );
        }
        fs::write(dir.path().join("notes.txt"), "not a slice").unwrap();
        let out = crate::VolumeSpec::new(dir.path().join("raw.h5"), "raw");
        let done = crate::import::import_stack(dir.path().to_str().unwrap(), &out, None).unwrap();
        assert_eq!(done.volume.shape, [3, 3, 5]);
        assert_eq!(stack_shape(&done.slices).unwrap(), [3, 3, 5]);
        // A box of it, written slab by slab.
        let boxed = crate::VolumeSpec::new(dir.path().join("raw.h5"), "box");
        crate::import::import_stack(
            dir.path().to_str().unwrap(),
            &boxed,
            Some(([1, 1, 2], [2, 2, 3])),
        )
        .unwrap();
        let b = crate::volume::read_image_u8(&boxed).unwrap();
        assert_eq!((b[[0, 0, 0]], b[[1, 1, 2]]), (112, 224));
        let v = crate::volume::read_image_u8(&out).unwrap();
        assert_eq!(v[[0, 0, 0]], 0);
        assert_eq!(v[[1, 2, 4]], 124);
        assert_eq!(v[[2, 1, 3]], 213);
        let pattern = dir.path().join("s.1*.png");
        assert_eq!(find_slices(pattern.to_str().unwrap()).unwrap().len(), 2);
    }

    #[test]
    fn odd_slices_are_named() {
        let dir = tempfile::tempdir().unwrap();
        write_png(
            &dir.path().join("a1.png"),
            4,
            4,
            png::ColorType::Grayscale,
            |_, _| 1,
        );
        write_png(
            &dir.path().join("a2.png"),
            4,
            5,
            png::ColorType::Grayscale,
            |_, _| 1,
        );
        let src = dir.path().to_str().unwrap();
        let e = read_stack(&find_slices(src).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a2.png: slice of size 4x5") && e.contains("a1.png is 4x4"),
            "{e}"
        );
        write_png(
            &dir.path().join("a2.png"),
            4,
            4,
            png::ColorType::Rgb,
            |_, _| 1,
        );
        let e = read_stack(&find_slices(src).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a2.png: expected an 8-bit grayscale PNG, found Rgb"),
            "{e}"
        );
        fs::write(dir.path().join("a2.png"), b"garbage").unwrap();
        let e = read_stack(&find_slices(src).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("a2.png: not a readable PNG"), "{e}");
        write_png(
            &dir.path().join("a02.png"),
            4,
            4,
            png::ColorType::Grayscale,
            |_, _| 1,
        );
        let e = find_slices(src).unwrap_err().to_string();
        assert!(e.contains("same number 2"), "{e}");
        let e = find_slices(dir.path().join("zz*.png").to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no PNG or TIFF slices found"), "{e}");
        let e = find_slices(dir.path().join("missing").to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing: file not found"), "{e}");
    }

    #[test]
    fn tiff_slices_multi_page_files_and_png_give_the_same_volume() {
        use crate::tiff_pages::tests::write_tiff;
        let dir = tempfile::tempdir().unwrap();
        let value = |z: u32, x: u32, y: u32| (z * 40 + y * 7 + x) as u8;
        let (png_dir, tif_dir, blocks) = (
            dir.path().join("png"),
            dir.path().join("tif"),
            dir.path().join("blocks"),
        );
        for d in [&png_dir, &tif_dir, &blocks] {
            fs::create_dir(d).unwrap();
        }
        for z in 0..6u32 {
            write_png(
                &png_dir.join(format!("s{z}.png")),
                5,
                4,
                png::ColorType::Grayscale,
                |x, y| value(z, x, y),
            );
            write_tiff(&tif_dir.join(format!("s{z}.TIF")), 5, 4, 1, |_, x, y| {
                value(z, x, y)
            });
        }
        // Two files of three pages each, and the same six pages in one file.
        for block in 0..2u32 {
            write_tiff(
                &blocks.join(format!("b{block}.tiff")),
                5,
                4,
                3,
                |p, x, y| value(block * 3 + p, x, y),
            );
        }
        let one = dir.path().join("all.tif");
        write_tiff(&one, 5, 4, 6, value);
        let from_png = read_stack(&find_slices(png_dir.to_str().unwrap()).unwrap()).unwrap();
        assert_eq!(from_png.shape(), [6, 4, 5]);
        assert_eq!(from_png[[5, 3, 4]], value(5, 4, 3));
        for src in [&tif_dir, &blocks, &one] {
            let v = read_stack(&find_slices(src.to_str().unwrap()).unwrap()).unwrap();
            assert_eq!(v, from_png, "{}", src.display());
        }
        // A multi-page file of another slice size is named.
        write_tiff(&blocks.join("b2.tif"), 4, 4, 2, |_, _, _| 0);
        let e = read_stack(&find_slices(blocks.to_str().unwrap()).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("b2.tif: slice of size 4x4"), "{e}");
        // A single file that is not a TIFF is refused with what is expected.
        let e = find_slices(png_dir.join("s0.png").to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("one multi-page TIFF"), "{e}");
    }

    /// A PNG chunk: length, type, data, CRC-32 of type and data.
    fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.sum().to_be_bytes());
        out
    }

    #[test]
    fn a_header_declaring_more_pixels_than_the_file_holds_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.png");
        let mut ihdr = 100_000u32.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&100_000u32.to_be_bytes());
        ihdr.extend_from_slice(&[8, 0, 0, 0, 0]); // 8-bit grayscale, no interlace
        let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
        bytes.extend(chunk(b"IHDR", &ihdr));
        bytes.extend(chunk(
            b"IDAT",
            &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
        ));
        bytes.extend(chunk(b"IEND", &[]));
        fs::write(&path, &bytes).unwrap();
        let e = read_png_slice(&path).unwrap_err().to_string();
        assert!(
            e.contains("huge.png") && e.contains("declares 100000 x 100000 pixels"),
            "{e}"
        );
    }
}
