//! `ffn export` (Neuroglancer precomputed, read back chunk by chunk) and `ffn view` (overlay PNG).

mod support;
use support::tiled::*;

use ndarray::Array3;

#[test]
fn export_writes_precomputed_volumes_that_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("v.h5");
    let shape = (21, 30, 17);
    let image = Array3::from_shape_fn(shape, |(z, y, x)| ((z * 31 + y * 7 + x * 3) % 256) as u8);
    let seg = Array3::from_shape_fn(shape, |(z, y, x)| {
        if x < 5 {
            0
        } else {
            (z / 4 * 100 + y / 6) as u64 + 70_000
        }
    });
    h5(|| {
        ffn_io::write_image_u8(&format!("{}:raw", s(&file)).parse().unwrap(), &image).unwrap();
        ffn_io::write_labels(&format!("{}:seg", s(&file)).parse().unwrap(), &seg).unwrap();
    });
    let out = dir.path().join("ng");
    let stdout = ok(&[
        "export",
        "--image",
        &format!("{}:raw", s(&file)),
        "--seg",
        &format!("{}:seg", s(&file)),
        "--out",
        &s(&out),
        "--resolution",
        "4,4,40",
        "--chunk",
        "8,16,8",
    ]);
    assert!(
        stdout.contains("precomputed uint32 segmentation"),
        "{stdout}"
    );
    let info = ffn_io::precomputed::read_info(&out.join("image"), None).unwrap();
    assert_eq!(info.resolution_zyx, [40.0, 4.0, 4.0]);
    assert_eq!(info.chunk_zyx, [8, 16, 8]);
    let back = h5(|| {
        ffn_io::read_image_u8(
            &format!("precomputed://{}", s(&out.join("image")))
                .parse()
                .unwrap(),
        )
    })
    .unwrap();
    assert_eq!(back, image);
    let seg_spec: ffn_io::VolumeSpec = s(&out.join("segmentation")).parse().unwrap();
    let info = ffn_io::precomputed::read_info(&seg_spec.path, None).unwrap();
    assert_eq!(info.data_type, ffn_io::precomputed::DataType::Uint32);
    assert_eq!(h5(|| ffn_io::read_labels(&seg_spec)).unwrap(), seg);
    // One chunk's box, as Neuroglancer would fetch it: x 8..16, y 16..30, z 16..21.
    let c = h5(|| ffn_io::read_labels_region(&seg_spec, [16, 16, 8], [5, 14, 8])).unwrap();
    assert_eq!(c, seg.slice(ndarray::s![16..21, 16..30, 8..16]));
    assert!(out.join("segmentation/4_4_40/8-16_16-30_16-21").is_file());
    // Bad arguments are named.
    let e = ffn(&["export", "--out", &s(&out)]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("give --image and/or --seg"));
    let e = ffn(&[
        "export",
        "--seg",
        &format!("{}:seg", s(&file)),
        "--out",
        &s(&out),
        "--chunk",
        "8,8",
    ]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("--chunk \"8,8\""));
}

#[test]
fn view_draws_the_overlay_of_a_tiled_segmentation() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _truth) = write_boxes(dir.path(), [24, 26, 28], 4);
    let seg = format!("{}:truth", s(&dir.path().join("boxes.h5")));
    let png_path = dir.path().join("slice.png");
    let stdout = ok(&[
        "view",
        &seg,
        "--image",
        &img,
        "--z",
        "12",
        "--out",
        &s(&png_path),
        "--zoom",
        "2",
    ]);
    assert!(stdout.contains("56 x 52 pixels"), "{stdout}");
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut buf).unwrap();
    assert_eq!((frame.width, frame.height), (56, 52));
    // Segments are coloured: not every pixel is grey.
    let rgb = &buf[..frame.buffer_size()];
    assert!(rgb.chunks(3).any(|p| p[0] != p[1] || p[1] != p[2]));
    let e = ffn(&["view", &seg, "--z", "99", "--out", &s(&png_path)]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("--z 99: expected 0..=23"));
}
