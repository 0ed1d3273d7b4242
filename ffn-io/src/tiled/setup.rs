//! A tiled run as `ffn infer-tiled` is told it ([`TiledSettings`], its flags) and what that
//! resolves to ([`TiledSetup`]: the predictor, the normalisation, the [`TiledOptions`] and plan);
//! and the connection of the ranks that share the run ([`connect_ranks`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ffn_comm::{Backend, CommOptions, Communicator};
use ffn_core::conv::winograd::ConvAlgorithm;
use ffn_core::inference::{
    InferenceOptions, LabelOracle, Predictor, SeedPolicy, SegmentOptions, Symmetries,
};

use crate::inference_defaults::InferenceDefaults;
use ffn_core::network::ConvStack3d;
use ffn_core::segmentation::{MergeRule, TilePlan};

use super::TiledOptions;
use crate::normalisation::{ChosenNormalisation, NormalisationChoice};
use crate::volume::VolumeSpec;
use crate::xyz::{parse_box, parse_sizes};

/// The settings of a tiled run as given, named after `ffn infer-tiled`'s flags. Text fields are
/// parsed by [`TiledSettings::resolve`], and its errors name the flag (`--tile-size`, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct TiledSettings {
    /// `--image`: the image (axes z, y, x).
    pub image: VolumeSpec,
    /// `--out`: the final segmentation (names the default tile store).
    pub out: VolumeSpec,
    /// `--checkpoint`: the model (an ffn-rs checkpoint or google/ffn's TF checkpoint).
    pub checkpoint: Option<PathBuf>,
    /// `--oracle`: predict the true mask of the label at the FOV centre (the image holds label
    /// ids) instead of running a model.
    pub oracle: bool,
    /// `--fov` of the oracle, `x,y,z` or one number.
    pub fov: String,
    /// `--deltas` of the oracle, `x,y,z` or one number.
    pub deltas: String,
    /// `--tile-size`, `x,y,z` or one number.
    pub tile_size: String,
    /// `--tile-overlap`, `x,y,z` or one number [the FOV].
    pub tile_overlap: Option<String>,
    /// `--tile-store`: the tile-store folder [[`default_store_dir`] of `out`].
    pub tile_store: Option<PathBuf>,
    /// `--max-tiles`: stop after this process computed this many tiles.
    pub max_tiles: Option<usize>,
    /// `--offset`, `x,y,z`: first voxel of the box to segment (with `size`) [the whole image].
    pub offset: Option<String>,
    /// `--size`, `x,y,z`: size of the box to segment (with `offset`).
    pub size: Option<String>,
    /// `--conv`: the convolution algorithm of the model.
    pub conv: ConvAlgorithm,
    /// `--image-mean` [the checkpoint's training normalisation, else 128].
    pub image_mean: Option<f32>,
    /// `--image-stddev` [the checkpoint's, else 33].
    pub image_stddev: Option<f32>,
    /// `--seed-policy grid`: seeds on a grid of `grid_step` (google/ffn's PolicyGrid3d) instead
    /// of PolicyPeaks.
    pub grid_seeds: bool,
    /// `--grid-step` of the grid seed policy (at least 1, also when unused).
    pub grid_step: usize,
    /// `--min-segment-size`: segments with fewer voxels are dropped [the model's recorded
    /// setting, else 1000].
    pub min_segment_size: Option<usize>,
    /// `--move-threshold`: object probability needed to move the FOV [the model's, else 0.9].
    pub move_threshold: Option<f32>,
    /// `--segment-threshold`: object probability at which a voxel joins a segment [the model's,
    /// else 0.6].
    pub segment_threshold: Option<f32>,
    /// `--symmetries`: average the predictions over these [the model's, else none].
    pub symmetries: Option<Symmetries>,
    /// `--min-boundary-dist`, `x,y,z` or one number: seeds this close to a segment are skipped.
    pub min_boundary_dist: String,
    /// `--min-overlap` and `--min-overlap-fraction`: when segments of neighbouring tiles merge.
    pub merge: MergeRule,
}

/// A tiled run ready to start: [`run_tiles`](super::run_tiles) takes its options, plan and
/// predictor.
pub struct TiledSetup {
    /// What the run segments, how it cuts the volume and merges the tiles.
    pub options: TiledOptions,
    /// The tiles.
    pub plan: TilePlan,
    /// The model (loaded by every rank) or the oracle.
    pub predictor: Box<dyn Predictor>,
    /// The predictor's field of view `[z, y, x]`.
    pub fov: [usize; 3],
    /// The image normalisation and where it came from (chosen also for the oracle, which is fed
    /// the raw values).
    pub normalisation: ChosenNormalisation,
    /// The inference settings recorded with the model, which the options start from (the
    /// settings' `Some` fields win over them).
    pub model_defaults: Option<InferenceDefaults>,
}

impl TiledSetup {
    /// Whether the overlap is below the FOV on an axis cut into several tiles: segments may then
    /// not reach every voxel of a tile's core.
    pub fn overlap_below_fov(&self) -> bool {
        let (grid, overlap) = (self.plan.grid_shape(), self.options.tile_overlap);
        (0..3).any(|a| grid[a] > 1 && overlap[a] < self.fov[a])
    }
}

impl TiledSettings {
    /// Checks the settings, loads the predictor, reads the image's size for the box (and its
    /// statistics when the model was trained with per-volume normalisation), and plans the tiles.
    pub fn resolve(&self) -> Result<TiledSetup> {
        if self.grid_step == 0 {
            bail!("--grid-step 0: expected at least 1");
        }

        // The predictor (the model is loaded by every rank).
        let (mut trained_norm, mut model_defaults) = (None, None);
        let (predictor, fov, deltas, predictor_desc): (
            Box<dyn Predictor>,
            [usize; 3],
            [usize; 3],
            String,
        ) = if self.oracle {
            let fov = parse_sizes("fov", &self.fov)?;
            let deltas = parse_sizes("deltas", &self.deltas)?;
            (
                Box::new(LabelOracle { fov }),
                fov,
                deltas,
                format!("oracle fov {fov:?} deltas {deltas:?}"),
            )
        } else {
            let path = self
                .checkpoint
                .clone()
                .context("--checkpoint is required (or --oracle)")?;
            let loaded = crate::load_model(&path)
                .with_context(|| format!("loading the model {}", path.display()))?;
            trained_norm = loaded.normalisation;
            model_defaults = loaded.inference_defaults;
            let (cfg, params) = (loaded.config, loaded.params);
            let (fov, deltas) = (cfg.fov, cfg.deltas);
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let desc = format!("model {} ({size} bytes) {cfg:?}", path.display());
            let mut net = ConvStack3d::from_params(cfg, params)
                .with_context(|| format!("model {}", path.display()))?;
            net.set_conv_algorithm(self.conv);
            (Box::new(net), fov, deltas, desc)
        };
        let mut inference = InferenceOptions {
            min_boundary_dist: parse_sizes("min-boundary-dist", &self.min_boundary_dist)?,
            ..Default::default()
        };
        if let Some(d) = &model_defaults {
            d.apply(&mut inference);
        }
        let given = InferenceDefaults {
            move_threshold: self.move_threshold,
            segment_threshold: self.segment_threshold,
            min_segment_size: self.min_segment_size,
            symmetries: self.symmetries,
            chosen_on: None,
        };
        given.apply(&mut inference);
        inference.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        self.merge.validate().context("--min-overlap-fraction")?;

        // The box, the plan and the normalisation.
        let image = &self.image;
        let full = crate::dataset_shape(image).with_context(|| format!("reading {image}"))?;
        let (offset, shape) = parse_box(self.offset.as_deref(), self.size.as_deref(), full, image)?;
        let norm = NormalisationChoice {
            given: (self.image_mean, self.image_stddev),
            trained: trained_norm,
            ..Default::default()
        }
        .resolve(|| {
            let raw = crate::read_image_f32_region(image, offset, shape)?;
            Ok(ffn_core::inference::mean_stddev(raw.iter().copied()))
        })?;
        let options = TiledOptions {
            image: image.clone(),
            offset,
            shape,
            tile_size: parse_sizes("tile-size", &self.tile_size)?,
            tile_overlap: match &self.tile_overlap {
                Some(t) => parse_sizes("tile-overlap", t)?,
                None => fov,
            },
            store: self
                .tile_store
                .clone()
                .unwrap_or_else(|| default_store_dir(&self.out)),
            max_tiles: self.max_tiles,
            stop_on_signal: false,
            normalisation: (!self.oracle).then_some((norm.mean, norm.stddev)),
            segment: SegmentOptions {
                deltas,
                seeds: match self.grid_seeds {
                    false => SeedPolicy::default(),
                    true => SeedPolicy::Grid {
                        step: self.grid_step,
                    },
                },
                inference,
                agglomerate: None,
            },
            merge: self.merge,
            predictor: predictor_desc,
        };
        let plan = options.plan().context("--tile-overlap / --tile-size")?;
        Ok(TiledSetup {
            options,
            plan,
            predictor,
            fov,
            normalisation: norm,
            model_defaults,
        })
    }
}

/// The tile store of the segmentation `out` by default: next to its file,
/// `<file name>.<dataset>.tiles`.
pub fn default_store_dir(out: &VolumeSpec) -> PathBuf {
    let mut name = out
        .path
        .file_name()
        .map(|s| s.to_os_string())
        .unwrap_or_default();
    name.push(format!(".{}.tiles", out.dataset.replace('/', "_")));
    out.path.with_file_name(name)
}

/// Connects this process to the other ranks of a tiled run with `backend` (options from the
/// communicator's environment, `timeout` for every collective, no stall warnings) and shares a
/// new run id: rank 0 draws 16 random bytes and broadcasts them; every rank returns them as hex.
pub fn connect_ranks(
    backend: Backend,
    timeout: Duration,
) -> Result<(Box<dyn Communicator>, String)> {
    let mut comm_opts = CommOptions::from_env().context("reading the communicator environment")?;
    comm_opts.timeout = timeout;
    comm_opts.stall_warning = Duration::ZERO;
    let mut comm = ffn_comm::connect(backend, &comm_opts)
        .with_context(|| format!("connecting with backend {backend}"))?;
    let mut run_id = match comm.rank() {
        0 => ffn_comm::launch::random_bytes(16),
        _ => vec![0u8; 16],
    };
    comm.broadcast_bytes(&mut run_id, 0)
        .context("broadcasting the run id")?;
    Ok((comm, run_id.iter().map(|b| format!("{b:02x}")).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array3;

    fn oracle_settings(dir: &std::path::Path) -> TiledSettings {
        let image = VolumeSpec::new(dir.join("ids.h5"), "ids");
        crate::write_image_f32(&image, &Array3::from_elem((20, 22, 24), 1.0)).unwrap();
        TiledSettings {
            image,
            out: VolumeSpec::new(dir.join("seg.h5"), "a/seg"),
            checkpoint: None,
            oracle: true,
            fov: "7,7,7".into(),
            deltas: "1".into(),
            tile_size: "12".into(),
            tile_overlap: Some("8,6,4".into()),
            tile_store: None,
            max_tiles: None,
            offset: None,
            size: None,
            conv: ConvAlgorithm::default(),
            image_mean: Some(0.0),
            image_stddev: Some(1.0),
            grid_seeds: true,
            grid_step: 4,
            min_segment_size: Some(10),
            move_threshold: None,
            segment_threshold: None,
            symmetries: None,
            min_boundary_dist: "1".into(),
            merge: MergeRule::default(),
        }
    }

    #[test]
    fn settings_resolve_to_options_and_a_plan() {
        let dir = tempfile::tempdir().unwrap();
        let s = oracle_settings(dir.path());
        let setup = s.resolve().unwrap();
        let o = &setup.options;
        assert_eq!((o.tile_size, o.tile_overlap), ([12; 3], [4, 6, 8]));
        assert_eq!(o.store, dir.path().join("seg.h5.a_seg.tiles"));
        assert_eq!(o.normalisation, None, "the oracle sees raw ids");
        assert_eq!(o.segment.seeds, SeedPolicy::Grid { step: 4 });
        assert_eq!(o.segment.inference.min_segment_size, 10);
        assert_eq!(setup.fov, [7; 3]);
        assert_eq!(setup.plan.len(), o.plan().unwrap().len());
        assert!(setup.overlap_below_fov(), "4 and 6 are below the FOV 7");
        assert_eq!(setup.normalisation.source, "from the command line");
    }

    #[test]
    fn a_models_recorded_inference_settings_apply_unless_given() {
        use crate::inference_defaults::{RecordOptions, write_with_defaults};
        use ffn_core::model_spec::ModelConfig;
        let dir = tempfile::tempdir().unwrap();
        let model = ModelConfig {
            depth: 1,
            features: 4,
            fov: [7, 7, 7],
            deltas: [1, 1, 1],
        };
        let plain = dir.path().join("m.safetensors");
        crate::checkpoint::save_zero_checkpoint(&plain, model);
        let tuned = dir.path().join("tuned.safetensors");
        let recorded = InferenceDefaults {
            move_threshold: Some(0.8),
            segment_threshold: Some(0.5),
            symmetries: Some(Symmetries::ALL),
            ..Default::default()
        };
        let opts = RecordOptions {
            model: plain,
            defaults: recorded.clone(),
        };
        write_with_defaults(&opts, &tuned).unwrap();
        let s = TiledSettings {
            oracle: false,
            checkpoint: Some(tuned),
            segment_threshold: Some(0.7),
            symmetries: Some(Symmetries::parse("flip-z").unwrap()),
            ..oracle_settings(dir.path())
        };
        let setup = s.resolve().unwrap();
        assert_eq!(setup.model_defaults, Some(recorded));
        let o = &setup.options.segment.inference;
        assert_eq!(
            (o.move_threshold, o.segment_threshold, o.min_segment_size),
            (0.8, 0.7, 10),
            "recorded move threshold, given segment threshold and min size"
        );
        assert_eq!(o.symmetries.to_string(), "flip-z", "given symmetries");
    }

    #[test]
    fn bad_settings_are_errors_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let err = |s: TiledSettings| format!("{:#}", s.resolve().err().unwrap());
        let s = oracle_settings(dir.path());
        let e = err(TiledSettings {
            grid_step: 0,
            ..s.clone()
        });
        assert_eq!(e, "--grid-step 0: expected at least 1");
        let e = err(TiledSettings {
            tile_size: "8,8".into(),
            ..s.clone()
        });
        assert!(e.starts_with("--tile-size \"8,8\""), "{e}");
        let e = err(TiledSettings { oracle: false, ..s });
        assert!(e.contains("--checkpoint is required"), "{e}");
    }
}
