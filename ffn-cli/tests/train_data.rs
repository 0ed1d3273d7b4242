//! End-to-end checks of the data preparation commands: synth -> partitions -> coordinates.

use std::path::Path;
use std::process::Command;

fn ffn(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ffn"))
        .args(args)
        .output()
        .expect("running ffn")
}

fn ok(args: &[&str]) -> String {
    let out = ffn(args);
    assert!(
        out.status.success(),
        "ffn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn synth_partitions_coordinates_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let h5 = dir.path().join("s.h5");
    ok(&[
        "synth",
        "--out",
        &s(&h5),
        "--shape",
        "40,36,32",
        "--neurites",
        "10",
        "--seed",
        "3",
    ]);
    let image = ffn_io::read_image_u8(&format!("{}:image", s(&h5)).parse().unwrap()).unwrap();
    let labels = ffn_io::read_labels(&format!("{}:labels", s(&h5)).parse().unwrap()).unwrap();
    assert_eq!(image.dim(), (32, 36, 40));
    assert_eq!(labels.dim(), (32, 36, 40));
    let out = ok(&[
        "partitions",
        "--labels",
        &format!("{}:labels", s(&h5)),
        "--out",
        &format!("{}:af", s(&h5)),
        "--lom-radius",
        "4",
        "--min-size",
        "100",
    ]);
    assert!(out.contains("255 (margin, excluded)"), "{out}");
    let parts = ffn_io::read_image_u8(&format!("{}:af", s(&h5)).parse().unwrap()).unwrap();
    assert_eq!(parts[(0, 0, 0)], 255);
    assert!(parts[(4, 4, 4)] != 255);
    let coords = dir.path().join("t.coords");
    let out = ok(&[
        "coordinates",
        "--partitions",
        &format!("synth:{}:af", s(&h5)),
        "--out",
        &s(&coords),
        "--margin",
        "6,6,6",
        "--seed",
        "1",
    ]);
    assert!(out.contains("coordinates"), "{out}");
    let file = ffn_io::coords::read_coords(&coords).unwrap();
    assert_eq!(file.volumes, ["synth"]);
    // Balanced: every present class has the same count.
    let mut counts = std::collections::BTreeMap::new();
    for c in &file.coords {
        let [z, y, x] = c.zyx.map(|v| v as usize);
        assert!((6..26).contains(&z) && (6..30).contains(&y) && (6..34).contains(&x));
        *counts.entry(parts[(z, y, x)]).or_insert(0) += 1;
    }
    assert!(counts.len() >= 3, "{counts:?}");
    let first = *counts.values().next().unwrap();
    assert!(counts.values().all(|&n| n == first), "{counts:?}");
}

#[test]
fn bad_inputs_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.h5");
    let out = ffn(&[
        "partitions",
        "--labels",
        &format!("{}:stack", s(&missing)),
        "--out",
        "x.h5:af",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.h5"), "{err}");
    let out = ffn(&[
        "synth",
        "--out",
        &s(&dir.path().join("a.h5")),
        "--shape",
        "4,4",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shape"));
    let out = ffn(&[
        "synth",
        "--out",
        &s(&dir.path().join("a.h5")),
        "--neurites",
        "0",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("neurites"));
}
