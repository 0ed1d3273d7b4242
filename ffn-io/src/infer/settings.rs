//! The settings of `ffn infer`, layered: defaults < the settings recorded with the model
//! ([`crate::inference_defaults`]) < a google/ffn [`InferenceRequest`] (which replaces the model's
//! settings as a whole) < explicit overrides (the command line); [`resolve_infer`] turns them into [`InferOptions`] and a loaded
//! network.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ffn_core::conv::winograd::ConvAlgorithm;
use ffn_core::inference::seeds::PeaksOptions;
use ffn_core::inference::{SeedPolicy, SegmentOptions, Symmetries};
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;

use super::InferOptions;
use crate::inference_defaults::InferenceDefaults;
use crate::normalisation::NormalisationChoice;
use crate::request::InferenceRequest;
use crate::volume::VolumeSpec;
use crate::xyz::{parse_box, parse_xyz};

/// Settings given explicitly, named after `ffn infer`'s flags: every `Some` (and a `true`) wins
/// over the request, which wins over the defaults. Text fields are parsed by [`resolve_infer`],
/// and its errors name the flag (`--image`, `--offset`, ...).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InferOverrides {
    /// `--image`: the image, `FILE.h5:DATASET` [the request's `image { hdf5 }`].
    pub image: Option<String>,
    /// `--checkpoint`: an ffn-rs checkpoint or google/ffn's TF checkpoint [the request's
    /// `model_checkpoint_path`].
    pub checkpoint: Option<PathBuf>,
    /// `--offset`, `x,y,z`: first voxel of the box to segment (with `size`) [the whole image].
    pub offset: Option<String>,
    /// `--size`, `x,y,z`: size of the box to segment (with `offset`).
    pub size: Option<String>,
    /// `--image-mean` [request, else the checkpoint's training normalisation, else 128].
    pub image_mean: Option<f32>,
    /// `--image-stddev` [request, else the checkpoint's, else 33].
    pub image_stddev: Option<f32>,
    /// `--seed-policy`: `peaks` / `PolicyPeaks`, `grid` / `PolicyGrid3d` or `list` [request,
    /// else peaks].
    pub seed_policy: Option<String>,
    /// `--seeds`: a file of seeds, one `x,y,z` per line in image coordinates; implies `list`.
    pub seeds_file: Option<PathBuf>,
    /// `--grid-step` of the grid policy [request `seed_policy_args.step`, else 16].
    pub grid_step: Option<usize>,
    /// `--init-activation` [request, else 0.95].
    pub init_activation: Option<f32>,
    /// `--pad-value` [request, else 0.05].
    pub pad_value: Option<f32>,
    /// `--move-threshold` [request, else the model's recorded setting, else 0.9].
    pub move_threshold: Option<f32>,
    /// `--segment-threshold` [request, else the model's recorded setting, else 0.6].
    pub segment_threshold: Option<f32>,
    /// `--min-segment-size` [request, else the model's recorded setting, else 1000].
    pub min_segment_size: Option<usize>,
    /// `--symmetries`: average the predictions over these [the model's recorded setting, else
    /// none; not part of a request].
    pub symmetries: Option<Symmetries>,
    /// `--min-boundary-dist`, `x,y,z` [request, else 1,1,1].
    pub min_boundary_dist: Option<String>,
    /// `--no-disco`: disable the "disco" rule (`disco_seed_threshold` -1).
    pub no_disco: bool,
    /// `--conv`: the convolution algorithm of the network (not part of a request).
    pub conv: ConvAlgorithm,
}

/// Where `ffn infer` writes (never taken from a request).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InferOutputs {
    /// `--out`: the segmentation, `FILE.h5:DATASET`.
    pub out: String,
    /// `--prob-out`: the quantised probability map, `FILE.h5:DATASET`.
    pub prob_out: Option<String>,
    /// `--seeds-out`: the seed points, one `x,y,z` line each.
    pub seeds_out: Option<PathBuf>,
    /// `--seeds-only`: stop after the seed points.
    pub seeds_only: bool,
}

/// Everything [`resolve_infer`] decided: the options of [`super::infer_volume`], the network, and
/// what a summary reports about them.
pub struct ResolvedInfer {
    /// The options of [`super::infer_volume`] (`region` is always set).
    pub options: InferOptions,
    /// The network, with its convolution algorithm set.
    pub net: ConvStack3d,
    /// The checkpoint it was loaded from.
    pub checkpoint: PathBuf,
    /// Its architecture (the request's `model_args` over the checkpoint's).
    pub model: ModelConfig,
    /// First voxel of the segmented box, `[z, y, x]`.
    pub offset: [usize; 3],
    /// Shape of the segmented box, `[z, y, x]`.
    pub shape: [usize; 3],
    /// The seed policy as named (`list`, `peaks`, `PolicyGrid3d`, ...).
    pub seed_policy: String,
    /// Fields of the request that inference does not use.
    pub ignored_request_fields: Vec<String>,
    /// The inference settings recorded with the model that were used (none when a request was
    /// given, which replaces them, or when the model records none); the command line's values
    /// still win over them.
    pub model_defaults: Option<InferenceDefaults>,
}

/// Resolves the settings of one inference: `given` over `request` (the file it was read from and
/// its fields) over the defaults. Chooses the image and checkpoint, loads the model (a request's
/// `model_args.depth` must match the checkpoint's), reads the size of the image for the box,
/// builds the seed policy (reading a seed list) and the options. Errors name the flag, the request
/// field or the file.
pub fn resolve_infer(
    given: &InferOverrides,
    outputs: &InferOutputs,
    request: Option<(&Path, &InferenceRequest)>,
) -> Result<ResolvedInfer> {
    let req = request.map(|(_, r)| r);
    let image_spec: VolumeSpec = match (&given.image, req.and_then(|r| r.image_hdf5.as_ref())) {
        (Some(s), _) => s.parse().context("--image")?,
        (None, Some(s)) => s.parse().context("request image.hdf5")?,
        (None, None) => bail!(
            "no image: give --image FILE.h5:DATASET (or a request with image {{ hdf5: ... }})"
        ),
    };
    let ckpt: PathBuf = match (
        &given.checkpoint,
        req.and_then(|r| r.model_checkpoint_path.as_ref()),
    ) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => {
            bail!("no model: give --checkpoint PATH (or a request with model_checkpoint_path)")
        }
    };
    let out_spec: VolumeSpec = outputs.out.parse().context("--out")?;
    let prob_spec: Option<VolumeSpec> = outputs
        .prob_out
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("--prob-out")?;
    VolumeSpec::check_not_input(&out_spec, "--out", &image_spec, "--image")?;
    if let Some(p) = &prob_spec {
        VolumeSpec::check_not_input(p, "--prob-out", &image_spec, "--image")?;
        VolumeSpec::check_not_input(p, "--prob-out", &out_spec, "--out")?;
    }

    // Model.
    let loaded = crate::load_model(&ckpt)
        .with_context(|| format!("loading the model {}", ckpt.display()))?;
    // google/ffn TF checkpoints hold no FOV (the request gives it); ffn-rs checkpoints record the
    // one the network was trained at.
    let fov_recorded = !crate::tf_bundle::is_tf_checkpoint(&loaded.path);
    let (ck_cfg, params, trained_norm) = (loaded.config, loaded.params, loaded.normalisation);
    // A request is a complete set of google/ffn inference options: it replaces the model's.
    let model_defaults = loaded.inference_defaults.filter(|_| req.is_none());
    let cfg: ModelConfig = match request {
        Some((p, r)) => {
            let c = r.model_config(ck_cfg, p)?;
            if c.depth != ck_cfg.depth {
                bail!(
                    "request {}: model_args.depth is {} but the checkpoint {} holds a depth-{} network",
                    p.display(),
                    c.depth,
                    ckpt.display(),
                    ck_cfg.depth
                );
            }
            if fov_recorded && c.fov != ck_cfg.fov {
                let xyz = |v: [usize; 3]| format!("{},{},{}", v[2], v[1], v[0]);
                bail!(
                    "request {}: model_args.fov_size {} (x,y,z) differs from the FOV {} that the \
                     checkpoint {} was trained with; remove fov_size from the request (the \
                     checkpoint's FOV is used)",
                    p.display(),
                    xyz(c.fov),
                    xyz(ck_cfg.fov),
                    ckpt.display()
                );
            }
            c
        }
        None => ck_cfg,
    };
    let mut net = ConvStack3d::from_params(cfg, params)
        .map_err(|e| anyhow::anyhow!("{}: {e}", ckpt.display()))?;
    net.set_conv_algorithm(given.conv);

    // The box, the options (defaults < request < given) and the seeds.
    let full = crate::dataset_shape(&image_spec)?;
    if full.contains(&0) {
        bail!("--image {image_spec}: the volume is empty (shape {full:?} z,y,x)");
    }
    let (offset, shape) = parse_box(
        given.offset.as_deref(),
        given.size.as_deref(),
        full,
        &image_spec,
    )?;
    let mut opts = match (req, &model_defaults) {
        (Some(r), _) => r.options.clone(),
        (None, Some(d)) => d.options(),
        (None, None) => Default::default(),
    };
    if let Some(v) = given.init_activation {
        opts.init_activation = v;
    }
    if let Some(v) = given.pad_value {
        opts.pad_value = v;
    }
    if let Some(v) = given.move_threshold {
        opts.move_threshold = v;
    }
    if let Some(v) = given.segment_threshold {
        opts.segment_threshold = v;
    }
    if let Some(v) = given.min_segment_size {
        opts.min_segment_size = v;
    }
    if let Some(v) = given.symmetries {
        opts.symmetries = v;
    }
    if let Some(v) = &given.min_boundary_dist {
        opts.min_boundary_dist = parse_xyz(v, "--min-boundary-dist")?;
    }
    if given.no_disco {
        opts.disco_seed_threshold = -1.0;
    }
    let policy = match (
        &given.seeds_file,
        &given.seed_policy,
        req.and_then(|r| r.seed_policy.as_deref()),
    ) {
        (Some(_), _, _) => "list".to_string(),
        (None, Some(p), _) => p.clone(),
        (None, None, Some(p)) => p.to_string(),
        _ => "peaks".to_string(),
    };
    let seeds = match policy.as_str() {
        "peaks" | "PolicyPeaks" => SeedPolicy::Peaks(PeaksOptions::default()),
        "grid" | "PolicyGrid3d" => {
            let step = given
                .grid_step
                .or(policy_args_usize(req, "step")?)
                .unwrap_or(16);
            if step == 0 {
                bail!("--grid-step 0 (or request seed_policy_args.step): expected at least 1");
            }
            SeedPolicy::Grid { step }
        }
        "list" => {
            let p = given
                .seeds_file
                .as_ref()
                .context("--seed-policy list needs --seeds FILE")?;
            SeedPolicy::List(read_seed_list(p, offset, shape)?)
        }
        other => bail!(
            "seed policy {other:?}: expected peaks (PolicyPeaks), grid (PolicyGrid3d) or list"
        ),
    };
    let options = InferOptions {
        image: image_spec,
        out: out_spec,
        prob_out: prob_spec,
        region: Some((offset, shape)),
        normalisation: NormalisationChoice {
            given: (given.image_mean, given.image_stddev),
            request: (
                req.and_then(|r| r.image_mean),
                req.and_then(|r| r.image_stddev),
            ),
            trained: trained_norm,
        },
        segment: SegmentOptions {
            deltas: cfg.deltas,
            seeds,
            inference: opts,
            agglomerate: None,
        },
        seeds_out: outputs.seeds_out.clone(),
        seeds_only: outputs.seeds_only,
    };
    Ok(ResolvedInfer {
        options,
        net,
        checkpoint: ckpt,
        model: cfg,
        offset,
        shape,
        seed_policy: policy,
        ignored_request_fields: req.map(|r| r.ignored.clone()).unwrap_or_default(),
        model_defaults,
    })
}

/// `seed_policy_args.<key>` of the request as a count, if given.
fn policy_args_usize(req: Option<&InferenceRequest>, key: &str) -> Result<Option<usize>> {
    let Some(v) = req
        .and_then(|r| r.seed_policy_args.as_ref())
        .and_then(|a| a.get(key))
    else {
        return Ok(None);
    };
    let n = v.as_u64().with_context(|| {
        format!("request seed_policy_args.{key}: expected a non-negative integer, found {v}")
    })?;
    Ok(Some(n as usize))
}

/// Reads a seed list file (see [`parse_seed_list`]); errors name the file and line.
pub fn read_seed_list(
    path: &Path,
    offset: [usize; 3],
    shape: [usize; 3],
) -> Result<Vec<[usize; 3]>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading seeds from {}", path.display()))?;
    parse_seed_list(&text, &path.display().to_string(), offset, shape)
}

/// Parses a seed list: one `x,y,z` per line in image coordinates (blank lines and `#` comments
/// skipped), every seed inside the box `offset + shape` (z,y,x); returns them in the box's
/// coordinates, `[z, y, x]`. Errors name `source` (the file) and the line.
pub fn parse_seed_list(
    text: &str,
    source: &str,
    offset: [usize; 3],
    shape: [usize; 3],
) -> Result<Vec<[usize; 3]>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let p = parse_xyz(l, &format!("{source}:{}", n + 1))?;
        // `p - offset` only once `p >= offset`: no overflow for any box.
        if (0..3).any(|a| p[a] < offset[a] || p[a] - offset[a] >= shape[a]) {
            bail!(
                "{source}:{}: seed {l} lies outside the segmented box {},{},{} + {} x {} x {} (x,y,z)",
                n + 1,
                offset[2],
                offset[1],
                offset[0],
                shape[2],
                shape[1],
                shape[0]
            );
        }
        out.push([p[0] - offset[0], p[1] - offset[1], p[2] - offset[2]]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::{InferReport, default_info_path, infer_volume};
    use ffn_core::inference::InferenceOptions;
    use ndarray::Array3;

    /// A 12 x 13 x 14 image `v.h5:raw` and a depth-1 checkpoint `m.safetensors` whose weights are
    /// zero (it predicts the seed) in `dir`.
    fn image_and_model(dir: &Path) -> (String, PathBuf) {
        let image = VolumeSpec::new(dir.join("v.h5"), "raw");
        crate::write_image_u8(&image, &Array3::from_elem((12, 13, 14), 128u8)).unwrap();
        let model = ModelConfig {
            depth: 1,
            features: 4,
            fov: [9, 9, 9],
            deltas: [2, 2, 2],
        };
        let path = dir.join("m.safetensors");
        crate::checkpoint::save_zero_checkpoint(&path, model);
        (image.to_string(), path)
    }

    fn outputs(dir: &Path) -> InferOutputs {
        InferOutputs {
            out: format!("{}:seg", dir.join("seg.h5").display()),
            ..Default::default()
        }
    }

    #[test]
    fn overrides_beat_the_request_which_beats_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let (image, ckpt) = image_and_model(dir.path());
        let out = outputs(dir.path());

        // Defaults: only the image and the model given.
        let given = InferOverrides {
            image: Some(image.clone()),
            checkpoint: Some(ckpt.clone()),
            ..Default::default()
        };
        let run = resolve_infer(&given, &out, None).unwrap();
        assert_eq!(run.options.segment.inference, InferenceOptions::default());
        assert_eq!(run.seed_policy, "peaks");
        assert_eq!((run.offset, run.shape), ([0; 3], [12, 13, 14]));
        assert_eq!(run.options.region, Some(([0; 3], [12, 13, 14])));
        assert_eq!(run.options.segment.deltas, [2, 2, 2]);
        assert_eq!(run.options.normalisation.request, (None, None));

        // The request over the defaults: image, model, seeds, thresholds, normalisation.
        let req_path = dir.path().join("req.pbtxt");
        let text = format!(
            "image {{ hdf5: \"{image}\" }}\nmodel_checkpoint_path: \"{}\"\nimage_mean: 100\n\
             seed_policy: \"PolicyGrid3d\"\nseed_policy_args: \"{{\\\"step\\\": 4}}\"\n\
             inference_options {{ move_threshold: 0.8 min_segment_size: 5 }}\n",
            ckpt.display()
        );
        let req = crate::parse_inference_request(&text, &req_path).unwrap();
        let from_request = InferOverrides::default();
        let run = resolve_infer(&from_request, &out, Some((&req_path, &req))).unwrap();
        assert_eq!(run.options.image.to_string(), image);
        assert_eq!(run.checkpoint, ckpt);
        assert_eq!(run.seed_policy, "PolicyGrid3d");
        assert_eq!(run.options.segment.seeds, SeedPolicy::Grid { step: 4 });
        let o = &run.options.segment.inference;
        assert_eq!((o.move_threshold, o.min_segment_size), (0.8, 5));
        assert_eq!(
            o.segment_threshold,
            InferenceOptions::default().segment_threshold
        );
        assert_eq!(run.options.normalisation.request, (Some(100.0), None));

        // Overrides over the request; what they leave alone stays the request's.
        let given = InferOverrides {
            grid_step: Some(2),
            move_threshold: Some(0.7),
            image_mean: Some(1.0),
            min_boundary_dist: Some("1,2,3".into()),
            no_disco: true,
            offset: Some("1,1,1".into()),
            size: Some("10,10,10".into()),
            ..Default::default()
        };
        let run = resolve_infer(&given, &out, Some((&req_path, &req))).unwrap();
        assert_eq!(run.options.segment.seeds, SeedPolicy::Grid { step: 2 });
        let o = &run.options.segment.inference;
        assert_eq!((o.move_threshold, o.min_segment_size), (0.7, 5));
        assert_eq!(o.min_boundary_dist, [3, 2, 1]);
        assert_eq!(o.disco_seed_threshold, -1.0);
        assert_eq!(run.options.normalisation.given, (Some(1.0), None));
        assert_eq!(run.options.normalisation.request, (Some(100.0), None));
        assert_eq!((run.offset, run.shape), ([1; 3], [10; 3]));

        // A seed list implies the list policy; its seeds come in box coordinates.
        let seeds = dir.path().join("seeds.txt");
        std::fs::write(&seeds, "# x,y,z\n2,3,4\n").unwrap();
        let given = InferOverrides {
            seeds_file: Some(seeds),
            ..given
        };
        let run = resolve_infer(&given, &out, Some((&req_path, &req))).unwrap();
        assert_eq!(run.seed_policy, "list");
        assert_eq!(run.options.segment.seeds, SeedPolicy::List(vec![[3, 2, 1]]));
    }

    #[test]
    fn the_models_recorded_settings_beat_the_defaults_and_yield_to_a_request_and_flags() {
        use crate::inference_defaults::{RecordOptions, write_with_defaults};
        let dir = tempfile::tempdir().unwrap();
        let (image, ckpt) = image_and_model(dir.path());
        let out = outputs(dir.path());
        let recorded = InferenceDefaults {
            segment_threshold: Some(0.5),
            min_segment_size: Some(100),
            ..Default::default()
        };
        let tuned = dir.path().join("tuned.safetensors");
        let opts = RecordOptions {
            model: ckpt.clone(),
            defaults: recorded.clone(),
        };
        write_with_defaults(&opts, &tuned).unwrap();

        // Recorded settings over google/ffn's defaults; the others stay the defaults.
        let given = InferOverrides {
            image: Some(image.clone()),
            checkpoint: Some(tuned.clone()),
            ..Default::default()
        };
        let run = resolve_infer(&given, &out, None).unwrap();
        assert_eq!(run.model_defaults.as_ref(), Some(&recorded));
        let o = &run.options.segment.inference;
        let d = InferenceOptions::default();
        assert_eq!(
            (o.move_threshold, o.segment_threshold, o.min_segment_size),
            (d.move_threshold, 0.5, 100)
        );

        // A flag wins over a recorded setting.
        let flagged = InferOverrides {
            min_segment_size: Some(7),
            ..given.clone()
        };
        let o = resolve_infer(&flagged, &out, None)
            .unwrap()
            .options
            .segment
            .inference;
        assert_eq!((o.segment_threshold, o.min_segment_size), (0.5, 7));

        // A request replaces them as a whole (its unset fields are google/ffn's defaults).
        let req_path = dir.path().join("req.pbtxt");
        let text = "inference_options { move_threshold: 0.8 }\n";
        let req = crate::parse_inference_request(text, &req_path).unwrap();
        let run = resolve_infer(&given, &out, Some((&req_path, &req))).unwrap();
        assert_eq!(run.model_defaults, None);
        let o = &run.options.segment.inference;
        assert_eq!(
            (o.move_threshold, o.segment_threshold, o.min_segment_size),
            (0.8, d.segment_threshold, d.min_segment_size)
        );

        // The original model records nothing.
        let plain = InferOverrides {
            checkpoint: Some(ckpt),
            ..given
        };
        assert_eq!(
            resolve_infer(&plain, &out, None).unwrap().model_defaults,
            None
        );
    }

    #[test]
    fn errors_name_the_flag_or_the_request() {
        let dir = tempfile::tempdir().unwrap();
        let (image, ckpt) = image_and_model(dir.path());
        let out = outputs(dir.path());
        let err = |given: &InferOverrides, req: Option<(&Path, &InferenceRequest)>| {
            format!("{:#}", resolve_infer(given, &out, req).err().unwrap())
        };
        let e = err(&InferOverrides::default(), None);
        assert!(e.starts_with("no image: give --image"), "{e}");
        let given = InferOverrides {
            image: Some(image),
            checkpoint: Some(ckpt),
            min_boundary_dist: Some("1,2".into()),
            ..Default::default()
        };
        let e = err(&given, None);
        assert!(e.starts_with("--min-boundary-dist \"1,2\""), "{e}");
        let req_path = dir.path().join("deep.pbtxt");
        let req =
            crate::parse_inference_request("model_args: '{\"depth\": 12}'\n", &req_path).unwrap();
        let e = err(&given, Some((&req_path, &req)));
        assert!(
            e.contains("deep.pbtxt: model_args.depth is 12") && e.contains("depth-1 network"),
            "{e}"
        );
        // A request FOV other than the one the ffn-rs checkpoint was trained with is refused, not
        // silently used.
        let req_path = dir.path().join("wide.pbtxt");
        let req = crate::parse_inference_request(
            "model_args: '{\"fov_size\": [99, 97, 95]}'\n",
            &req_path,
        )
        .unwrap();
        let e = err(&given, Some((&req_path, &req)));
        assert!(
            e.contains("wide.pbtxt: model_args.fov_size 99,97,95 (x,y,z) differs from the FOV"),
            "{e}"
        );
        let given = InferOverrides {
            min_boundary_dist: None,
            seed_policy: Some("grid".into()),
            grid_step: Some(0),
            ..given
        };
        let e = err(&given, None);
        assert!(e.starts_with("--grid-step 0"), "{e}");
    }

    #[test]
    fn a_resolved_run_segments_and_reports() {
        let dir = tempfile::tempdir().unwrap();
        let (image, ckpt) = image_and_model(dir.path());
        let given = InferOverrides {
            image: Some(image),
            checkpoint: Some(ckpt),
            seed_policy: Some("grid".into()),
            grid_step: Some(8),
            min_segment_size: Some(1),
            ..Default::default()
        };
        let mut run = resolve_infer(&given, &outputs(dir.path()), None).unwrap();
        let done = infer_volume(&run.options, &mut run.net, &mut |_| {}).unwrap();
        let seg = done.segmentation.as_ref().unwrap();
        let report = InferReport::new(&run, &done, seg);
        let s = &report.summary;
        assert_eq!(s["size_xyz"], serde_json::json!([14, 13, 12]));
        assert_eq!(s["seed_policy"], "grid");
        assert_eq!(s["conv"], "winograd3d");
        assert_eq!(s["counters"]["segments"], s["segments"]);
        assert_eq!(report.origins.len(), seg.origins.len());
        let path = default_info_path(&run.options.out);
        assert_eq!(path, dir.path().join("seg.seg.json"));
        report.write_info(&path).unwrap();
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        // Through the same text round trip on both sides (serde_json's float parsing may differ
        // from the f64 in the last digit).
        let expected: serde_json::Value = serde_json::from_str(&report.info().to_string()).unwrap();
        assert_eq!(info, expected);
        assert!(info["origins"].is_array());
    }

    /// Found while writing the `seeds` fuzz target: the check `seed < offset + shape` overflowed
    /// for a box reaching the end of the address space (a panic in debug builds).
    #[test]
    fn fuzz_seed_in_a_box_at_the_largest_offset_does_not_overflow() {
        let max = usize::MAX;
        let seeds = parse_seed_list(&format!("{max},{max},{max}\n"), "s.txt", [max; 3], [1; 3]);
        assert_eq!(seeds.unwrap(), vec![[0, 0, 0]]);
        let e = parse_seed_list("# x,y,z\n\n1,2,3\n", "s.txt", [max; 3], [max; 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.txt:3: seed 1,2,3 lies outside"), "{e}");
    }
}
