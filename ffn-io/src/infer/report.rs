//! The JSON report of `ffn infer`: the summary (printed with `--json`) and the info file next to
//! the segmentation (the summary plus every segment's origin), written atomically.

use std::path::{Path, PathBuf};

use anyhow::Result;
use ffn_core::conv::winograd::ConvAlgorithm;
use ffn_core::inference::{Counters, InferenceOptions, Segmentation};
use serde_json::{Value, json};

use super::{InferOutcome, ResolvedInfer};
use crate::atomic::write_atomic;
use crate::volume::VolumeSpec;

/// The report of a finished run.
#[derive(Clone, Debug, PartialEq)]
pub struct InferReport {
    /// Settings, model, normalisation, seeds, counters and timing (`ffn infer --json`).
    pub summary: Value,
    /// One entry per segment: id, seed (x,y,z in image coordinates), iterations, time, voxels.
    pub origins: Vec<Value>,
}

impl InferReport {
    /// The report of `seg`, found by `done` with the settings `run`.
    pub fn new(run: &ResolvedInfer, done: &InferOutcome, seg: &Segmentation) -> Self {
        let (offset, shape, cfg) = (run.offset, run.shape, &run.model);
        let total_voxels = (shape[0] * shape[1] * shape[2]) as f64;
        let (c, norm, wall) = (&seg.counters, &done.normalisation, done.seconds);
        let xyz = |p: [usize; 3]| json!([p[2] + offset[2], p[1] + offset[1], p[0] + offset[0]]);
        let origins = seg
            .origins
            .iter()
            .map(|o| json!({"id": o.id, "seed_xyz": xyz(o.seed), "iterations": o.iterations, "time_s": o.time_s, "voxels": o.voxels}))
            .collect();
        let summary = json!({
            "image": run.options.image.to_string(),
            "checkpoint": run.checkpoint.display().to_string(),
            "output": run.options.out.to_string(),
            "conv": run.net.conv_algorithm().name(),
            "bf16_products": (run.net.conv_algorithm() == ConvAlgorithm::Bf16)
                .then(ffn_core::conv::bf16::products_name),
            "model": {"depth": cfg.depth, "features": cfg.features,
                      "fov_xyz": [cfg.fov[2], cfg.fov[1], cfg.fov[0]], "deltas_xyz": [cfg.deltas[2], cfg.deltas[1], cfg.deltas[0]]},
            "offset_xyz": [offset[2], offset[1], offset[0]],
            "size_xyz": [shape[2], shape[1], shape[0]],
            "image_mean": norm.mean,
            "image_stddev": norm.stddev,
            "image_normalisation_source": norm.source,
            "options": options_json(&run.options.segment.inference),
            "model_inference_defaults": run.model_defaults.as_ref().map(|d| d.to_json()),
            "seed_policy": run.seed_policy,
            "seeds": done.seeds.len(),
            "seed_policy_s": done.seed_seconds,
            "segments": seg.agglomeration.as_ref().map_or(c.segments, |a| a.segments_after),
            "voxels_segmented_fraction": c.voxels_segmented as f64 / total_voxels,
            "predict_calls": c.predict_calls,
            "wall_time_s": wall,
            "predict_calls_per_s": c.predict_calls as f64 / wall.max(1e-9),
            "counters": counters_json(c),
            "agglomeration": seg.agglomeration.as_ref().map(|a| json!({
                "touching_pairs": a.touching_pairs, "tested_pairs": a.tested_pairs,
                "already_joined_pairs": a.already_joined_pairs,
                "joined_pairs": a.joined_pairs, "segments_before": a.segments_before,
                "segments_after": a.segments_after, "predict_calls": a.predictions})),
            "ignored_request_fields": run.ignored_request_fields,
        });
        Self { summary, origins }
    }

    /// The info file's content: the summary with `origins`.
    pub fn info(&self) -> Value {
        let mut info = self.summary.clone();
        info["origins"] = Value::Array(self.origins.clone());
        info
    }

    /// Writes [`InferReport::info`] as pretty JSON to `path`, atomically.
    pub fn write_info(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.info())? + "\n";
        Ok(write_atomic(path, text.as_bytes())?)
    }
}

/// Where the info file of the segmentation `out` goes by default: next to its file,
/// `<file stem>.<dataset>.json` (`<folder>.json` for a precomputed volume's first scale or a
/// Zarr root array).
pub fn default_info_path(out: &VolumeSpec) -> PathBuf {
    let stem = out
        .path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ds = out.dataset.trim_matches('/').replace('/', "_");
    if ds.is_empty() {
        return out.path.with_file_name(format!("{stem}.json"));
    }
    out.path.with_file_name(format!("{stem}.{ds}.json"))
}

/// The counters of a run as a JSON object, one field each.
pub fn counters_json(c: &Counters) -> Value {
    json!({
        "predict_calls": c.predict_calls,
        "seeds_total": c.seeds_total,
        "seeds_done": c.seeds_done,
        "seeds_invalid": c.seeds_invalid,
        "seeds_marked_failed": c.seeds_marked_failed,
        "seeds_near_segment": c.seeds_near_segment,
        "seeds_weak": c.seeds_weak,
        "seeds_too_small": c.seeds_too_small,
        "seeds_no_iterations": c.seeds_no_iterations,
        "segments": c.segments,
        "voxels_segmented": c.voxels_segmented,
        "voxels_overlapping": c.voxels_overlapping,
        "skip_threshold": c.skip_threshold,
        "skip_invalid_pos": c.skip_invalid_pos,
        "seed_got_too_weak": c.seed_got_too_weak,
    })
}

/// The flood-fill options as a JSON object (`min_boundary_dist` as x,y,z; `symmetries` as
/// `ffn infer --symmetries` writes them).
pub fn options_json(o: &InferenceOptions) -> Value {
    json!({
        "init_activation": o.init_activation,
        "pad_value": o.pad_value,
        "move_threshold": o.move_threshold,
        "segment_threshold": o.segment_threshold,
        "min_segment_size": o.min_segment_size,
        "min_boundary_dist_xyz": [o.min_boundary_dist[2], o.min_boundary_dist[1], o.min_boundary_dist[0]],
        "disco_seed_threshold": o.disco_seed_threshold,
        "symmetries": o.symmetries.to_string(),
    })
}
