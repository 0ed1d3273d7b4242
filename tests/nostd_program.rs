//! The no_std proof runs real work: builds the `#![no_std]` program in `nostd-check/` (its own
//! workspace and target directory, ffn-core without default features), runs it, and compares what
//! it prints (network size, the logits of one forward pass, the flood fill's segments) with the
//! same computation, the same source file, run here through ffn-core built with std.

extern crate alloc;

#[path = "../nostd-check/src/work.rs"]
mod work;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Tolerance of the logits, relative to the largest `|logit|`. Built with std, ffn-core's GEMMs run
/// through the `gemm` crate (SIMD and FMA detected at run time); without std, through its portable
/// fallback. Both sum the same products in other orders and roundings, so a logit differs by a few
/// f32 ulps of the largest partial sums (of the size of the largest logits, weights having stddev
/// 1); measured: about 4e-7 of the largest logit (337).
const LOGIT_RTOL: f32 = 1e-5;

/// The root's target directory (`.../target` above `debug/deps/<this test>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .nth(3)
        .expect("target directory")
        .to_path_buf()
}

fn build_and_run() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = target_dir().join("nostd-check");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--manifest-path"])
        .arg(root.join("nostd-check/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("cargo build of nostd-check");
    assert!(status.success(), "building nostd-check failed: {status}");
    let out = Command::new(target.join("debug/ffn-nostd-check"))
        .output()
        .expect("run ffn-nostd-check");
    assert!(
        out.status.success(),
        "ffn-nostd-check failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Reads the program's output back into a report.
fn parse(text: &str) -> work::Report {
    let mut r = work::Report {
        params: 0,
        logits: Vec::new(),
        segments: Vec::new(),
        predict_calls: 0,
        min_abs_logit: f32::NAN,
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["params", n] => r.params = n.parse().expect("params"),
            ["logit", i, v] => {
                assert_eq!(i.parse::<usize>().expect("logit index"), r.logits.len());
                r.logits.push(v.parse().expect("logit value"));
            }
            ["predict_calls", n] => r.predict_calls = n.parse().expect("predict_calls"),
            ["min_abs_logit", v] => r.min_abs_logit = v.parse().expect("min_abs_logit"),
            ["segment", id, voxels] => r
                .segments
                .push((id.parse().expect("id"), voxels.parse().expect("voxels"))),
            ["logit_sum" | "segments", _] => {}
            _ => panic!("unexpected line {line:?}"),
        }
    }
    r
}

#[test]
fn nostd_program_matches_ffn_core_with_std() {
    let text = build_and_run();
    println!("no_std program:\n{text}");
    let got = parse(&text);
    let want = work::run().expect("the computation with std");
    let mut with_std = String::new();
    work::print(&want, &mut with_std).expect("format");
    println!("with std:\n{with_std}");
    assert_eq!(got.params, want.params, "parameter count");
    assert_eq!(got.logits.len(), want.logits.len(), "number of logits");
    let scale = want.logits.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    let mut max_rel = 0.0f32;
    for (i, (g, w)) in got.logits.iter().zip(&want.logits).enumerate() {
        let rel = (g - w).abs() / scale;
        assert!(
            rel <= LOGIT_RTOL,
            "logit {i}: no_std {g}, std {w} (largest {scale})"
        );
        max_rel = max_rel.max(rel);
    }
    println!("largest logit difference no_std vs std: {max_rel:e} of the largest logit {scale}");
    // The flood fill sees only the signs of the network's logits (`work::Signs`), so its segments
    // and predictions compare exactly, as long as no logit came within rounding of 0; 1e-3 is far
    // above the differences the logits show.
    assert!(
        want.min_abs_logit >= 1e-3,
        "a logit of the flood fill lies within {} of 0: the comparison would be fragile",
        want.min_abs_logit
    );
    assert_eq!(got.segments, want.segments, "segments (id, voxels)");
    assert_eq!(got.predict_calls, want.predict_calls, "network evaluations");
    assert!(!want.segments.is_empty(), "the flood fill found no segment");
}
