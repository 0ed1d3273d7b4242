//! `ffn import` and `ffn inspect` end to end: the FIB-25 sample in two commands, and bad input giving
//! a non-zero exit with a one-line message.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FFN: &str = env!("CARGO_BIN_EXE_ffn");

/// The repository's `data/` folder (FIB-25 sample and Google's model); missing data is a failure,
/// not a skip.
fn repo_data() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data");
    assert!(
        dir.join("fib25/grayscale_maps").is_dir(),
        "test data missing: {}",
        dir.display()
    );
    dir
}

fn ffn(args: &[&str], cwd: &Path) -> Output {
    Command::new(FFN)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run ffn")
}

/// Runs ffn expecting success; returns stdout.
fn ok(args: &[&str], cwd: &Path) -> String {
    let out = ffn(args, cwd);
    assert!(
        out.status.success(),
        "ffn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs ffn expecting failure with a one-line message; returns it.
fn fails(args: &[&str], cwd: &Path) -> String {
    let out = ffn(args, cwd);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "ffn {args:?}: expected exit 1, stderr: {err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(
        err.starts_with("error: ") && !err.contains("panicked"),
        "{err}"
    );
    err
}

fn write_png(path: &Path, w: u32, h: u32) {
    let file = std::fs::File::create(path).unwrap();
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Grayscale);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()
        .unwrap()
        .write_image_data(&vec![7u8; (w * h) as usize])
        .unwrap();
}

#[test]
fn fib25_sample_imports_in_two_commands() {
    let data = repo_data().join("fib25");
    let tmp = tempfile::tempdir().unwrap();
    let maps = data.join("grayscale_maps");
    let gt = data.join("groundtruth.h5.gz");
    let out = ok(
        &[
            "import",
            "stack",
            maps.to_str().unwrap(),
            "--output",
            "raw.h5:raw",
        ],
        tmp.path(),
    );
    assert!(
        out.contains("250 x 250 x 250") && out.contains("250 slices"),
        "{out}"
    );
    let out = ok(
        &[
            "import",
            "labels",
            gt.to_str().unwrap(),
            "--output",
            "groundtruth.h5:stack",
        ],
        tmp.path(),
    );
    assert!(out.contains("526 distinct ids"), "{out}");

    let raw =
        ffn_io::read_image_u8(&ffn_io::VolumeSpec::new(tmp.path().join("raw.h5"), "raw")).unwrap();
    assert_eq!(raw.shape(), [250, 250, 250]);
    // z = 0 is iso.2600.png and z = 249 is iso.2849.png, rows are y.
    for (z, name) in [(0, "iso.2600.png"), (249, "iso.2849.png")] {
        let (w, h, px) = ffn_io::stack::read_png_slice(&maps.join(name)).unwrap();
        assert_eq!((w, h), (250, 250));
        let plane = &raw.as_slice().unwrap()[z * 250 * 250..(z + 1) * 250 * 250];
        assert_eq!(plane, px.as_slice(), "{name}");
    }
    let spec = ffn_io::VolumeSpec::new(tmp.path().join("groundtruth.h5"), "stack");
    let bodies = ffn_io::read_labels(&spec).unwrap();
    assert_eq!(bodies.shape(), [250, 250, 250]);
    let mut ids: Vec<u64> = bodies.iter().copied().collect();
    ids.sort_unstable();
    ids.dedup();
    // 526 bodies: 525 non-zero ids plus body 0, which a single supervoxel maps to (data README).
    assert_eq!(ids.len(), 526);
    assert_eq!(ffn_io::labels::count_objects(&bodies), 525);
    let zeros = bodies.iter().filter(|&&b| b == 0).count();
    assert!(
        zeros > 0 && (zeros as f64) < 1e-4 * bodies.len() as f64,
        "{zeros} zero voxels"
    );
    // The raw supervoxels differ: many more ids.
    let sv = ffn_io::labels::read_flyem_labels(&gt, "stack", None).unwrap();
    assert!(ffn_io::labels::count_objects(&sv) > 20_000);

    // A box of both (x,y,z offset 10,20,30, size 40,50,60) equals that box of the full imports.
    let boxed = ["--offset", "10,20,30", "--size", "40,50,60"];
    let mut args = vec![
        "import",
        "stack",
        maps.to_str().unwrap(),
        "--output",
        "box.h5:raw",
    ];
    args.extend(boxed);
    let out = ok(&args, tmp.path());
    assert!(
        out.contains("60 x 50 x 40") && out.contains("box at x,y,z = 10,20,30 of size 40,50,60"),
        "{out}"
    );
    let mut args = vec![
        "import",
        "labels",
        gt.to_str().unwrap(),
        "--output",
        "box.h5:gt",
    ];
    args.extend(boxed);
    ok(&args, tmp.path());
    let crop =
        ffn_io::read_image_u8(&ffn_io::VolumeSpec::new(tmp.path().join("box.h5"), "raw")).unwrap();
    let crop_gt =
        ffn_io::read_labels(&ffn_io::VolumeSpec::new(tmp.path().join("box.h5"), "gt")).unwrap();
    let sl = ndarray::s![30..90, 20..70, 10..50];
    assert_eq!(crop, raw.slice(sl));
    assert_eq!(crop_gt, bodies.slice(sl));
    // A box that does not fit, or half a box, is an error naming the flags.
    for bad in [
        ["--offset", "0,0,200", "--size", "250,250,60"],
        ["--offset", "0,0,0", "--size", "0,10,10"],
    ] {
        let mut args = vec![
            "import",
            "stack",
            maps.to_str().unwrap(),
            "--output",
            "bad.h5:raw",
        ];
        args.extend(bad);
        let o = ffn(&args, tmp.path());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("--offset/--size"),
            "{err}"
        );
    }
    let o = ffn(
        &[
            "import",
            "labels",
            gt.to_str().unwrap(),
            "-o",
            "bad.h5:gt",
            "--size",
            "5,5,5",
        ],
        tmp.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--offset and --size go together"),
        "{err}"
    );
    assert!(!tmp.path().join("bad.h5").exists());
}

#[test]
fn bad_input_exits_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // A PNG slice of another size, named.
    let slices = t.join("slices");
    std::fs::create_dir(&slices).unwrap();
    write_png(&slices.join("s1.png"), 6, 5);
    write_png(&slices.join("s2.png"), 6, 5);
    write_png(&slices.join("s3.png"), 5, 6);
    let err = fails(&["import", "stack", "slices", "--output", "raw.h5:raw"], t);
    assert!(
        err.contains("s3.png: slice of size 5x6") && err.contains("s1.png is 6x5"),
        "{err}"
    );
    assert!(!t.join("raw.h5").exists());
    // Missing file.
    let err = fails(&["inspect", "nope.safetensors"], t);
    assert!(err.contains("nope.safetensors: file not found"), "{err}");
    let err = fails(
        &["import", "labels", "nope.h5", "--output", "gt.h5:stack"],
        t,
    );
    assert!(err.contains("nope.h5: file not found"), "{err}");
    // Not HDF5.
    std::fs::write(t.join("text.h5"), "hello").unwrap();
    let err = fails(
        &["import", "labels", "text.h5", "--output", "gt.h5:stack"],
        t,
    );
    assert!(err.contains("text.h5: not a readable HDF5 file"), "{err}");
    // Bad volume spec.
    let err = fails(&["import", "stack", "slices", "--output", "raw.h5"], t);
    assert!(
        err.contains("invalid volume 'raw.h5'") && err.contains("FILE:DATASET"),
        "{err}"
    );
    // Missing dataset lists the existing ones.
    write_png(&slices.join("s3.png"), 6, 5);
    ok(&["import", "stack", "slices", "--output", "vol.h5:raw"], t);
    let err = fails(
        &["import", "labels", "vol.h5", "--output", "gt.h5:stack"],
        t,
    );
    assert!(
        err.contains("vol.h5: no dataset 'stack'; datasets in the file: raw"),
        "{err}"
    );
    // Without a table, a uint8 image imports as labels.
    let out = ok(
        &[
            "import",
            "labels",
            "vol.h5",
            "--stack-dataset",
            "raw",
            "--no-transforms",
            "-o",
            "gt.h5:l",
        ],
        t,
    );
    assert!(
        out.contains("uint8") && out.contains("1 distinct ids"),
        "{out}"
    );
    // Not a checkpoint.
    let err = fails(&["inspect", "vol.h5"], t);
    assert!(
        err.contains("vol.h5")
            && err.contains("neither a TensorFlow checkpoint nor a safetensors file"),
        "{err}"
    );
}

#[test]
fn config_file_supplies_flags_and_typos_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::create_dir(t.join("slices")).unwrap();
    write_png(&t.join("slices/a1.png"), 3, 2);
    std::fs::write(
        t.join("imp.toml"),
        "source = 'slices'\noutput = 'from_config.h5:raw'\n",
    )
    .unwrap();
    ok(&["import", "stack", "--config", "imp.toml"], t);
    assert!(t.join("from_config.h5").exists());
    // The flag overrides the file.
    ok(
        &[
            "import",
            "stack",
            "--config",
            "imp.toml",
            "--output",
            "from_flag.h5:raw",
        ],
        t,
    );
    assert!(t.join("from_flag.h5").exists());
    std::fs::write(
        t.join("typo.toml"),
        "source = 'slices'\nouptut = 'x.h5:raw'\n",
    )
    .unwrap();
    let err = fails(&["import", "stack", "--config", "typo.toml"], t);
    assert!(
        err.contains(
            "typo.toml: line 2, column 1: unknown key `ouptut` (valid keys: source, output)"
        ),
        "{err}"
    );
    std::fs::write(t.join("partial.toml"), "source = 'slices'\n").unwrap();
    let err = fails(&["import", "stack", "--config", "partial.toml"], t);
    assert!(
        err.contains("missing --output") && err.contains("`output` in partial.toml"),
        "{err}"
    );
}

#[test]
fn inspect_lists_both_checkpoint_formats() {
    let reference = repo_data().join("google-fib25/model.ckpt-27465036");
    let tmp = tempfile::tempdir().unwrap();
    let out = ok(&["inspect", reference.to_str().unwrap()], tmp.path());
    assert!(
        out.contains("TensorFlow tensor bundle") && out.contains("638433 parameters"),
        "{out}"
    );
    assert!(
        out.contains("seed_update/conv11_b/weights") && out.contains("[3, 3, 3, 32, 32]"),
        "{out}"
    );
    assert!(
        out.contains("global_step") && out.contains("int32"),
        "{out}"
    );
    let json = ok(
        &[
            "inspect",
            "--json",
            &format!("{}.index", reference.display()),
        ],
        tmp.path(),
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["model"]["num_params"], 638_433);
    assert_eq!(v["tensors"].as_array().unwrap().len(), 54);

    // An ffn-rs checkpoint.
    let model = ffn_core::model_spec::ModelConfig {
        depth: 2,
        features: 4,
        ..Default::default()
    };
    let ckpt = ffn_io::Checkpoint {
        model,
        params: vec![0.5; model.num_params()],
        optimizer: vec![("velocity".into(), vec![0.0; model.num_params()])],
        step: 7,
        rng_state: [1, 2, 3, 4],
        training_config: serde_json::json!({ "lr": 0.001 }),
    };
    let path = tmp.path().join("c.safetensors");
    ffn_io::save_checkpoint(&path, &ckpt).unwrap();
    let out = ok(&["inspect", "c.safetensors"], tmp.path());
    assert!(
        out.contains("ffn-rs safetensors") && out.contains("step: 7"),
        "{out}"
    );
    assert!(
        out.contains("conv1_b/weights") && out.contains("optimizer/velocity"),
        "{out}"
    );
    assert!(
        out.contains(&format!("{} parameters", model.num_params())),
        "{out}"
    );

    // A corrupt TF data file: crc error.
    for f in [
        "model.ckpt-27465036.index",
        "model.ckpt-27465036.data-00000-of-00001",
    ] {
        std::fs::copy(reference.with_file_name(f), tmp.path().join(f)).unwrap();
    }
    let data = tmp.path().join("model.ckpt-27465036.data-00000-of-00001");
    let mut bytes = std::fs::read(&data).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 1;
    std::fs::write(&data, bytes).unwrap();
    let err = fails(&["inspect", "model.ckpt-27465036"], tmp.path());
    assert!(err.contains("checksum mismatch in tensor"), "{err}");
}

#[test]
fn outputs_that_would_replace_their_input_are_refused_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(
        &[
            "synth",
            "--out",
            "s.h5",
            "--shape",
            "24,24,24",
            "--neurites",
            "3",
        ],
        t,
    );
    let before = std::fs::read(t.join("s.h5")).unwrap();
    let err = fails(
        &[
            "partitions",
            "--labels",
            "s.h5:labels",
            "--out",
            "./s.h5:/labels",
        ],
        t,
    );
    assert!(
        err.contains("--out") && err.contains("would replace the input"),
        "{err}"
    );
    let model = repo_data().join("../models/ffn-rs-fib25/model.safetensors");
    let model = model.to_str().unwrap();
    for (flag, target) in [("--out", "s.h5:image"), ("--prob-out", "s.h5:image")] {
        let mut args = vec!["infer", "--image", "s.h5:image", "--checkpoint", model];
        if flag == "--out" {
            args.extend(["--out", target]);
        } else {
            args.extend(["--out", "seg.h5:seg", "--prob-out", target]);
        }
        let err = fails(&args, t);
        assert!(
            err.contains(flag) && err.contains("would replace the input"),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read(t.join("s.h5")).unwrap(),
        before,
        "the input file changed"
    );
    // An empty volume is an error, not "covering NaN%".
    let empty = ffn_io::VolumeSpec::new(t.join("e.h5"), "image");
    ffn_io::write_image_u8(&empty, &ndarray::Array3::zeros((0, 4, 4))).unwrap();
    let args = [
        "infer",
        "--image",
        "e.h5:image",
        "--checkpoint",
        model,
        "--out",
        "o.h5:seg",
    ];
    let err = fails(&args, t);
    assert!(err.contains("the volume is empty"), "{err}");
}

/// A write that fails half-way (here: past the file-size limit, as a full disk or quota would)
/// leaves the HDF5 file it was writing into as it was, with all its other datasets, and no
/// temporary file behind.
#[test]
fn a_failed_write_into_an_existing_file_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(
        &[
            "synth",
            "--out",
            "f.h5",
            "--shape",
            "24,24,24",
            "--neurites",
            "3",
        ],
        t,
    );
    let notes = ffn_io::VolumeSpec::new(t.join("f.h5"), "notes");
    let marks = ndarray::Array3::from_shape_fn((2, 3, 4), |(z, y, x)| (z * 12 + y * 4 + x) as u8);
    ffn_io::write_image_u8(&notes, &marks).unwrap();
    // The FIB-25 labels, uncompressed (so that only the write into f.h5 meets the limit).
    let gz = repo_data().join("fib25/groundtruth.h5.gz");
    ok(
        &[
            "import",
            "labels",
            gz.to_str().unwrap(),
            "--output",
            "gt.h5:stack",
        ],
        t,
    );
    let gt = t.join("gt.h5");
    let before = std::fs::read(t.join("f.h5")).unwrap();
    // Room for a copy of the file and a little more, not for the FIB-25 labels (megabytes).
    let limit_kib = before.len() / 1024 + 64;
    let script = format!(
        "ulimit -f {limit_kib} && exec \"$0\" import labels \"$1\" --no-transforms --output f.h5:labels"
    );
    let out = Command::new("bash")
        .args(["-c", &script, FFN, gt.to_str().unwrap()])
        .current_dir(t)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("f.h5"), "{err}");
    assert_eq!(
        std::fs::read(t.join("f.h5")).unwrap(),
        before,
        "the file changed"
    );
    assert_eq!(ffn_io::read_image_u8(&notes).unwrap(), marks);
    let image = ffn_io::VolumeSpec::new(t.join("f.h5"), "image");
    assert_eq!(ffn_io::read_image_u8(&image).unwrap().shape(), [24, 24, 24]);
    let names: Vec<String> = std::fs::read_dir(t)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".tmp-")), "{names:?}");
    // Without the limit the same command succeeds and keeps the other datasets.
    ok(
        &[
            "import",
            "labels",
            gt.to_str().unwrap(),
            "--no-transforms",
            "--output",
            "f.h5:labels",
        ],
        t,
    );
    assert_eq!(ffn_io::read_image_u8(&notes).unwrap(), marks);
}

#[test]
fn a_multi_page_lzw_tiff_of_fib25_slices_imports_like_the_pngs() {
    let maps = repo_data().join("fib25/grayscale_maps");
    let tmp = tempfile::tempdir().unwrap();
    let tif = tmp.path().join("fib25-10.tif");
    let file = std::fs::File::create(&tif).unwrap();
    let mut enc = tiff::encoder::TiffEncoder::new(file)
        .unwrap()
        .with_compression(tiff::encoder::Compression::Lzw);
    for z in 2600..2610 {
        let (w, h, px) = ffn_io::stack::read_png_slice(&maps.join(format!("iso.{z}.png"))).unwrap();
        enc.write_image::<tiff::encoder::colortype::Gray8>(w, h, &px)
            .unwrap();
    }
    drop(enc);
    let pattern = maps.join("iso.260?.png");
    for (src, out) in [
        (tif.to_str().unwrap(), "v.h5:tif"),
        (pattern.to_str().unwrap(), "v.h5:png"),
    ] {
        let said = ok(&["import", "stack", src, "--output", out], tmp.path());
        assert!(
            said.contains("10 x 250 x 250 (z,y,x) from 10 slices"),
            "{said}"
        );
    }
    let read = |d: &str| {
        ffn_io::read_image_u8(&ffn_io::VolumeSpec::new(tmp.path().join("v.h5"), d)).unwrap()
    };
    let (from_tif, from_png) = (read("tif"), read("png"));
    assert_eq!(from_tif.shape(), [10, 250, 250]);
    assert_eq!(from_tif, from_png);
}
