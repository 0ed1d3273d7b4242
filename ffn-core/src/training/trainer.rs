//! The training example machinery of one replica: `batch_size` independent example generators, each
//! walking its own example move by move, fed from one shared stream of coordinates.
//!
//! One step: [`Trainer::prepare_batch`] asks every generator for its next FOV (starting a new example
//! when the current one has no valid move left, and scoring the finished one in the tracker), the
//! network runs on [`Trainer::inputs`], and [`Trainer::complete_batch`] writes the predicted logits
//! back into each example's canvas.
//!
//! Everything that influences later steps (generator RNGs, examples' canvases and move states, the
//! coordinate cursor, the tracker window) is in [`Trainer::save_state`], so that a run resumed from a
//! checkpoint continues exactly as if it had never stopped.
//!
//! Coordinates are taken in order `cursor * stride + offset` (modulo their number); data-parallel
//! replicas use `stride = world size`, `offset = rank` to read disjoint parts of the stream.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use ndarray::Array3;

use super::augmentation::Augmentation;
use super::coordinates::Coordinate;
use super::examples::{Example, ExampleConfig, FovPolicy, Moves, patch_fits, patch_start};
use super::source::{InMemory, PatchSource};
use super::tracker::{Metrics, Tracker};
use super::{TrainingError, invalid};
use crate::rng::Rng;

/// One training volume in memory: normalised image and labels, both `[z, y, x]`.
#[derive(Clone, Debug)]
pub struct TrainingVolume {
    /// Name (as in the coordinate file).
    pub name: String,
    /// Image already normalised: `(raw - mean) / stddev`.
    pub image: Array3<f32>,
    /// Object ids (0 = background).
    pub labels: Array3<u64>,
}

impl TrainingVolume {
    /// The volume `name` of the raw 8-bit `image`, normalised as `(raw - mean) / stddev`, and its
    /// `labels`.
    pub fn from_u8(
        name: &str,
        image: &Array3<u8>,
        labels: Array3<u64>,
        mean: f32,
        stddev: f32,
    ) -> Self {
        Self {
            name: name.into(),
            image: image.mapv(|g| (f32::from(g) - mean) / stddev),
            labels,
        }
    }
}

/// Parameters of a [`Trainer`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainerConfig {
    /// Example parameters.
    pub example: ExampleConfig,
    /// Independent example generators, one per batch element.
    pub batch_size: usize,
    /// Seed of the generators' RNG streams.
    pub seed: u64,
    /// First coordinate read (replica rank in data-parallel training).
    pub coord_offset: u64,
    /// Step between coordinates read (replica count in data-parallel training), >= 1.
    pub coord_stride: u64,
}

impl TrainerConfig {
    /// A single-replica configuration.
    pub fn new(example: ExampleConfig, batch_size: usize, seed: u64) -> Self {
        Self {
            example,
            batch_size,
            seed,
            coord_offset: 0,
            coord_stride: 1,
        }
    }
}

#[derive(Clone, Debug)]
struct Generator {
    rng: Rng,
    /// Current example and the index of its coordinate.
    example: Option<(u64, Example)>,
}

/// Batches of training examples for one replica.
#[derive(Debug)]
pub struct Trainer {
    cfg: TrainerConfig,
    source: Box<dyn PatchSource>,
    coords: Vec<Coordinate>,
    gens: Vec<Generator>,
    cursor: u64,
    step: u64,
    tracker: Tracker,
    image: Vec<f32>,
    seed: Vec<f32>,
    labels: Vec<f32>,
    offsets: Vec<[i32; 3]>,
    prepared: bool,
    patch_image: Vec<f32>,
    patch_labels: Vec<u64>,
}

/// The network inputs of one prepared batch: `batch` FOVs each, `[z][y][x]` per FOV.
#[derive(Clone, Copy, Debug)]
pub struct BatchInputs<'a> {
    /// Normalised image.
    pub image: &'a [f32],
    /// Seed logits (the canvases).
    pub seed: &'a [f32],
    /// Soft labels.
    pub labels: &'a [f32],
    /// Number of FOVs.
    pub batch: usize,
}

const MAGIC: &[u8; 8] = b"FFNTRST1";

impl Trainer {
    /// Checks the configuration, the volumes (image and labels shapes agree) and every coordinate
    /// (names an existing volume; its training patch fits inside).
    pub fn new(
        cfg: TrainerConfig,
        volumes: Vec<TrainingVolume>,
        coords: Vec<Coordinate>,
    ) -> Result<Self, TrainingError> {
        Self::with_source(cfg, InMemory::new(volumes)?.boxed(), coords)
    }

    /// Like [`Trainer::new`], with the training patches read from `source` (for example regions of
    /// volumes on disk that do not fit in memory).
    pub fn with_source(
        cfg: TrainerConfig,
        source: Box<dyn PatchSource>,
        coords: Vec<Coordinate>,
    ) -> Result<Self, TrainingError> {
        cfg.example.validate()?;
        if cfg.batch_size == 0 {
            return Err(invalid("batch_size", ">= 1", 0));
        }
        if cfg.coord_stride == 0 {
            return Err(invalid("coord_stride", ">= 1", 0));
        }
        if coords.is_empty() {
            return Err(invalid("coordinates", "at least one coordinate", 0));
        }
        for (i, c) in coords.iter().enumerate() {
            let v = c.volume as usize;
            if v >= source.volume_count() {
                return Err(TrainingError::BadCoordinate {
                    index: i,
                    reason: format!(
                        "volume index {} but only {} volumes given",
                        c.volume,
                        source.volume_count()
                    ),
                });
            }
            let d = source.shape(v);
            let zyx = c.zyx;
            if !patch_fits(&cfg.example, d, zyx) {
                return Err(TrainingError::BadCoordinate {
                    index: i,
                    reason: format!(
                        "training patch {:?} around x,y,z = {},{},{} does not fit in volume {:?} of shape \
                         {:?} (z,y,x): rebuild the coordinates with a margin of at least half the patch",
                        cfg.example.patch_shape(),
                        zyx[2],
                        zyx[1],
                        zyx[0],
                        source.name(v),
                        d
                    ),
                });
            }
        }
        let gens = (0..cfg.batch_size)
            .map(|i| Generator {
                rng: Rng::with_stream(cfg.seed, Self::stream(&cfg, i)),
                example: None,
            })
            .collect();
        let n = cfg.batch_size * cfg.example.fov_len();
        Ok(Self {
            cfg,
            source,
            coords,
            gens,
            cursor: 0,
            step: 0,
            tracker: Tracker::default(),
            image: vec![0.0; n],
            seed: vec![0.0; n],
            labels: vec![0.0; n],
            offsets: vec![[0; 3]; cfg.batch_size],
            prepared: false,
            patch_image: Vec::new(),
            patch_labels: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &TrainerConfig {
        &self.cfg
    }

    /// Where the training patches come from.
    pub fn source(&self) -> &dyn PatchSource {
        self.source.as_ref()
    }

    /// Steps completed.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Coordinates consumed so far (= examples started).
    pub fn examples_started(&self) -> u64 {
        self.cursor
    }

    /// RNG stream of generator `i`: its index among all replicas' generators (`i * stride + offset`),
    /// so that `n` replicas of batch `b` draw what one replica of batch `n * b` draws.
    fn stream(cfg: &TrainerConfig, i: usize) -> u64 {
        (i as u64)
            .wrapping_mul(cfg.coord_stride)
            .wrapping_add(cfg.coord_offset)
    }

    /// Continues at `step` with fresh examples, reading coordinates from `cursor` on, with RNG
    /// streams derived from the step (used when a data-parallel run resumes on another number of
    /// replicas, where the saved per-replica states do not apply). The tracker window restarts.
    pub fn restart_at(&mut self, step: u64, cursor: u64) {
        let seed = self.cfg.seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for (i, g) in self.gens.iter_mut().enumerate() {
            *g = Generator {
                rng: Rng::with_stream(seed, Self::stream(&self.cfg, i)),
                example: None,
            };
        }
        self.step = step;
        self.cursor = cursor;
        self.tracker = Tracker::default();
        self.prepared = false;
    }

    fn start_example(&mut self, g: usize) -> Result<(), TrainingError> {
        let n = self.coords.len() as u64;
        let index = (self
            .cursor
            .wrapping_mul(self.cfg.coord_stride)
            .wrapping_add(self.cfg.coord_offset))
            % n;
        self.cursor += 1;
        let coord = self.coords[index as usize];
        let aug = self.cfg.example.augment.draw(&mut self.gens[g].rng);
        self.read_patch(coord)?;
        let ex = Example::from_patch(
            &self.cfg.example,
            &self.patch_image,
            &self.patch_labels,
            coord,
            aug,
            &mut self.gens[g].rng,
        );
        self.gens[g].example = Some((index, ex));
        Ok(())
    }

    /// Reads the training patch of `coord` from the source into the patch buffers.
    fn read_patch(&mut self, coord: Coordinate) -> Result<(), TrainingError> {
        let cfg = &self.cfg.example;
        let (v, shape) = (coord.volume as usize, cfg.patch_shape());
        self.source.read(
            v,
            patch_start(cfg, coord),
            shape,
            &mut self.patch_image,
            &mut self.patch_labels,
        )?;
        let n: usize = shape.iter().product();
        if self.patch_image.len() != n || self.patch_labels.len() != n {
            return Err(TrainingError::Read {
                volume: self.source.name(v).into(),
                reason: format!(
                    "the source gave {} image and {} label values for a patch of {n}",
                    self.patch_image.len(),
                    self.patch_labels.len()
                ),
            });
        }
        Ok(())
    }

    /// Fills the batch inputs with every generator's next FOV (reading the patches of examples
    /// that start). Calling it again before [`Trainer::complete_batch`] changes nothing.
    pub fn prepare_batch(&mut self) -> Result<(), TrainingError> {
        if self.prepared {
            return Ok(());
        }
        let fov = self.cfg.example.fov_len();
        for g in 0..self.gens.len() {
            let off = loop {
                if self.gens[g].example.is_none() {
                    self.start_example(g)?;
                }
                // Just ensured above.
                let Some((_, ex)) = self.gens[g].example.as_mut() else {
                    continue;
                };
                match ex.next_offset(&self.cfg.example) {
                    Some(off) => break off,
                    None => {
                        let (logits, labels) = ex.eval_region(&self.cfg.example);
                        self.tracker.add_patch(&logits, &labels);
                        self.gens[g].example = None;
                    }
                }
            };
            self.offsets[g] = off;
            if let Some((_, ex)) = &self.gens[g].example {
                let r = g * fov..(g + 1) * fov;
                ex.fill_inputs(
                    &self.cfg.example,
                    off,
                    &mut self.image[r.clone()],
                    &mut self.seed[r.clone()],
                    &mut self.labels[r],
                );
            }
        }
        self.prepared = true;
        Ok(())
    }

    /// The inputs of the prepared batch (prepare it first).
    pub fn inputs(&self) -> BatchInputs<'_> {
        BatchInputs {
            image: &self.image,
            seed: &self.seed,
            labels: &self.labels,
            batch: self.cfg.batch_size,
        }
    }

    /// Writes the batch's predicted logits back into the canvases and records the step's loss.
    /// `logits` holds `batch * fov_len` values.
    pub fn complete_batch(&mut self, logits: &[f32], loss: f32) -> Result<(), TrainingError> {
        let fov = self.cfg.example.fov_len();
        if logits.len() != self.cfg.batch_size * fov {
            return Err(invalid(
                "logits",
                format!("{} values", self.cfg.batch_size * fov),
                logits.len(),
            ));
        }
        if !self.prepared {
            return Err(invalid("batch", "a prepared batch", "none"));
        }
        for (g, gen_) in self.gens.iter_mut().enumerate() {
            if let Some((_, ex)) = &mut gen_.example {
                ex.write_back(
                    &self.cfg.example,
                    self.offsets[g],
                    &logits[g * fov..(g + 1) * fov],
                );
            }
        }
        self.tracker.add_loss(loss);
        self.step += 1;
        self.prepared = false;
        Ok(())
    }

    /// One full step with `run(image, seed, labels, batch, logits) -> loss` as the network.
    pub fn step_with(
        &mut self,
        logits: &mut [f32],
        run: impl FnOnce(&[f32], &[f32], &[f32], usize, &mut [f32]) -> f32,
    ) -> Result<f32, TrainingError> {
        self.prepare_batch()?;
        let loss = run(
            &self.image,
            &self.seed,
            &self.labels,
            self.cfg.batch_size,
            logits,
        );
        self.complete_batch(logits, loss)?;
        Ok(loss)
    }

    /// The metrics of the current window, and starts a new one.
    pub fn take_metrics(&mut self) -> Metrics {
        self.take_tracker().metrics()
    }

    /// The confusion counts and loss sums of the current window, and starts a new one (for
    /// metrics over several trainers, e.g. the ranks of a data-parallel group).
    pub fn take_tracker(&mut self) -> Tracker {
        core::mem::take(&mut self.tracker)
    }

    /// The metrics of the current window so far.
    pub fn metrics(&self) -> Metrics {
        self.tracker.metrics()
    }

    /// Serialises the complete state (little-endian bytes). Call between steps.
    pub fn save_state(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        w.0.extend_from_slice(MAGIC);
        self.write_fingerprint(&mut w);
        w.u64(self.step);
        w.u64(self.cursor);
        let t = &self.tracker;
        for v in [
            t.tp,
            t.fp,
            t.tn,
            t.fn_,
            t.loss_sum.to_bits(),
            t.steps,
            t.examples,
        ] {
            w.u64(v);
        }
        for g in &self.gens {
            for s in g.rng.state() {
                w.u64(s);
            }
            match &g.example {
                None => w.u64(0),
                Some((index, ex)) => {
                    w.u64(1);
                    w.u64(*index);
                    w.u64(ex.aug.to_bits());
                    w.u64(ex.canvas().len() as u64);
                    for &c in ex.canvas() {
                        w.0.extend_from_slice(&c.to_bits().to_le_bytes());
                    }
                    match ex.moves() {
                        Moves::Fixed { order, next } => {
                            w.u64(0);
                            w.offsets(order);
                            w.u64(*next as u64);
                        }
                        Moves::MaxPred {
                            queue,
                            done,
                            pending,
                        } => {
                            w.u64(1);
                            w.offsets(&queue.iter().copied().collect::<Vec<_>>());
                            w.offsets(done);
                            match pending {
                                None => w.u64(0),
                                Some(p) => {
                                    w.u64(1);
                                    w.offsets(&[*p]);
                                }
                            }
                        }
                    }
                }
            }
        }
        w.0
    }

    fn write_fingerprint(&self, w: &mut Writer) {
        let e = &self.cfg.example;
        w.u64(self.cfg.batch_size as u64);
        for d in 0..3 {
            w.u64(e.fov[d] as u64);
            w.u64(e.deltas[d] as u64);
        }
        w.u64(e.fov_moves as u64);
        w.u64(matches!(e.policy, FovPolicy::MaxPredMoves) as u64);
        w.u64(self.coords.len() as u64);
    }

    /// Restores a state written by [`Trainer::save_state`] for the same configuration and coordinates.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<(), TrainingError> {
        let mut r = Reader { b: bytes, pos: 0 };
        if r.take(8)? != MAGIC {
            return Err(TrainingError::BadState {
                reason: "not a trainer state (bad magic)".into(),
            });
        }
        let mut expected = Writer(Vec::new());
        self.write_fingerprint(&mut expected);
        if r.take(expected.0.len())? != expected.0.as_slice() {
            return Err(TrainingError::BadState {
                reason: "saved with another batch size, FOV, deltas, fov_moves, FOV policy or coordinate list"
                    .into(),
            });
        }
        let step = r.u64()?;
        let cursor = r.u64()?;
        let mut t = [0u64; 7];
        for v in &mut t {
            *v = r.u64()?;
        }
        let tracker = Tracker {
            tp: t[0],
            fp: t[1],
            tn: t[2],
            fn_: t[3],
            loss_sum: f64::from_bits(t[4]),
            steps: t[5],
            examples: t[6],
        };
        let mut gens = Vec::with_capacity(self.gens.len());
        for _ in 0..self.gens.len() {
            let mut s = [0u64; 4];
            for v in &mut s {
                *v = r.u64()?;
            }
            let rng = Rng::from_state(s);
            let example = match r.u64()? {
                0 => None,
                1 => {
                    let index = r.u64()?;
                    let coord = *self.coords.get(index as usize).ok_or_else(|| {
                        TrainingError::BadState {
                            reason: format!("coordinate index {index} out of range"),
                        }
                    })?;
                    let aug = Augmentation::from_bits(r.u64()?).ok_or_else(|| {
                        TrainingError::BadState {
                            reason: "bad augmentation".into(),
                        }
                    })?;
                    let n = r.u64()? as usize;
                    let raw = r.take(n.checked_mul(4).ok_or_else(|| r.truncated())?)?;
                    let canvas = raw
                        .chunks_exact(4)
                        .map(|c| f32::from_bits(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                        .collect();
                    let moves = match r.u64()? {
                        0 => {
                            let order = r.offsets()?;
                            let next = r.u64()? as usize;
                            Moves::Fixed { order, next }
                        }
                        1 => {
                            let queue = r.offsets()?.into();
                            let done = r.offsets()?;
                            let pending = match r.u64()? {
                                0 => None,
                                _ => r.offsets()?.first().copied(),
                            };
                            Moves::MaxPred {
                                queue,
                                done,
                                pending,
                            }
                        }
                        k => {
                            return Err(TrainingError::BadState {
                                reason: format!("unknown move kind {k}"),
                            });
                        }
                    };
                    if coord.volume as usize >= self.source.volume_count() {
                        return Err(TrainingError::BadState {
                            reason: format!("volume index {} out of range", coord.volume),
                        });
                    }
                    // The RNG passed here is only used for the move order, which is then replaced.
                    let mut scratch = Rng::new(0);
                    self.read_patch(coord)?;
                    let mut ex = Example::from_patch(
                        &self.cfg.example,
                        &self.patch_image,
                        &self.patch_labels,
                        coord,
                        aug,
                        &mut scratch,
                    );
                    ex.restore(canvas, moves)?;
                    Some((index, ex))
                }
                k => {
                    return Err(TrainingError::BadState {
                        reason: format!("bad example flag {k}"),
                    });
                }
            };
            gens.push(Generator { rng, example });
        }
        if r.pos != bytes.len() {
            return Err(TrainingError::BadState {
                reason: format!("{} trailing bytes", bytes.len() - r.pos),
            });
        }
        self.step = step;
        self.cursor = cursor;
        self.tracker = tracker;
        self.gens = gens;
        self.prepared = false;
        Ok(())
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn offsets(&mut self, o: &[[i32; 3]]) {
        self.u64(o.len() as u64);
        for p in o {
            for c in p {
                self.0.extend_from_slice(&c.to_le_bytes());
            }
        }
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn truncated(&self) -> TrainingError {
        TrainingError::BadState {
            reason: format!("truncated at byte {}", self.pos),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], TrainingError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| self.truncated())?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u64(&mut self) -> Result<u64, TrainingError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }

    fn offsets(&mut self) -> Result<Vec<[i32; 3]>, TrainingError> {
        let n = self.u64()? as usize;
        let raw = self.take(n.checked_mul(12).ok_or_else(|| self.truncated())?)?;
        Ok(raw
            .chunks_exact(12)
            .map(|c| {
                let v = |i: usize| i32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
                [v(0), v(4), v(8)]
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::training::augmentation::AugmentConfig;

    fn setup_volume() -> TrainingVolume {
        let image = Array3::from_shape_fn((15, 15, 16), |(z, y, x)| {
            ((z * 7 + y * 3 + x) % 11) as f32 / 11.0
        });
        let labels =
            Array3::from_shape_fn((15, 15, 16), |(z, y, x)| ((x + y / 2 + z / 3) / 4) as u64);
        TrainingVolume {
            name: "a".into(),
            image,
            labels,
        }
    }

    fn setup(batch: usize) -> Trainer {
        let volumes = vec![setup_volume()];
        let coords: Vec<Coordinate> = (4..11)
            .flat_map(|z| {
                (4..12).map(move |x| Coordinate {
                    volume: 0,
                    zyx: [z, 7, x],
                })
            })
            .collect();
        let ex = ExampleConfig {
            augment: AugmentConfig::default(),
            ..ExampleConfig::new([5, 5, 5], [2, 2, 2])
        };
        Trainer::new(TrainerConfig::new(ex, batch, 9), volumes, coords).unwrap()
    }

    /// A stand-in network: prediction = seed + 0.5 * image + 0.1 * label; loss = mean of it.
    fn fake_net(image: &[f32], seed: &[f32], labels: &[f32], _b: usize, out: &mut [f32]) -> f32 {
        for i in 0..out.len() {
            out[i] = seed[i] + 0.5 * image[i] + 3.0 * (labels[i] - 0.5);
        }
        out.iter().sum::<f32>() / out.len() as f32
    }

    #[test]
    fn state_round_trip_continues_identically() {
        let mut a = setup(3);
        let mut logits = vec![0.0; 3 * 125];
        let mut losses_a = Vec::new();
        for _ in 0..40 {
            losses_a.push(a.step_with(&mut logits, fake_net).unwrap());
        }
        let mut b = setup(3);
        for _ in 0..17 {
            b.step_with(&mut logits, fake_net).unwrap();
        }
        let saved = b.save_state();
        let mut c = setup(3);
        c.load_state(&saved).unwrap();
        assert_eq!(c.save_state(), saved);
        let mut losses_c = losses_a[..17].to_vec();
        for _ in 17..40 {
            losses_c.push(c.step_with(&mut logits, fake_net).unwrap());
        }
        assert_eq!(losses_a, losses_c);
        assert_eq!(a.save_state(), c.save_state());
        assert_eq!(a.metrics(), c.metrics());
        assert!(a.metrics().examples > 0);
    }

    #[test]
    fn bad_inputs_are_reported() {
        let mut t = setup(2);
        assert!(t.load_state(b"nonsense").is_err());
        let s = t.save_state();
        assert!(t.load_state(&s[..s.len() - 1]).is_err());
        let mut other = setup(3);
        assert!(other.load_state(&s).is_err());
        let ex = ExampleConfig::new([5, 5, 5], [2, 2, 2]);
        let vol = TrainingVolume {
            name: "v".into(),
            image: Array3::zeros((9, 9, 9)),
            labels: Array3::zeros((9, 9, 9)),
        };
        let bad = vec![Coordinate {
            volume: 0,
            zyx: [3, 4, 4],
        }];
        let e = Trainer::new(TrainerConfig::new(ex, 1, 0), vec![vol.clone()], bad).unwrap_err();
        assert!(e.to_string().contains("does not fit"), "{e}");
        let bad = vec![Coordinate {
            volume: 1,
            zyx: [4, 4, 4],
        }];
        assert!(Trainer::new(TrainerConfig::new(ex, 1, 0), vec![vol], bad).is_err());
        assert!(t.complete_batch(&[0.0; 3], 0.0).is_err());
    }

    #[test]
    fn strided_replicas_read_disjoint_coordinates() {
        let mut a = setup(1);
        a.cfg.coord_stride = 2;
        let mut b = setup(1);
        b.cfg.coord_stride = 2;
        b.cfg.coord_offset = 1;
        let mut logits = vec![0.0; 125];
        let mut seen = [Vec::new(), Vec::new()];
        // 56 coordinates, at most 20 examples each: no wrap-around.
        for _ in 0..20 {
            for (k, t) in [&mut a, &mut b].into_iter().enumerate() {
                t.step_with(&mut logits, fake_net).unwrap();
                if let Some((i, _)) = &t.gens[0].example {
                    seen[k].push(*i);
                }
            }
        }
        assert!(seen[0].iter().all(|i| i % 2 == 0) && seen[1].iter().all(|i| i % 2 == 1));
    }

    /// A source serving the volume of [`setup`], failing or short on request.
    #[derive(Debug)]
    struct Flaky {
        inner: InMemory,
        reads: usize,
        fail_after: usize,
        short: bool,
    }

    impl PatchSource for Flaky {
        fn volume_count(&self) -> usize {
            self.inner.volume_count()
        }
        fn name(&self, volume: usize) -> &str {
            self.inner.name(volume)
        }
        fn shape(&self, volume: usize) -> [usize; 3] {
            self.inner.shape(volume)
        }
        fn read(
            &mut self,
            volume: usize,
            start: [usize; 3],
            shape: [usize; 3],
            image: &mut Vec<f32>,
            labels: &mut Vec<u64>,
        ) -> Result<(), TrainingError> {
            self.reads += 1;
            if self.reads > self.fail_after {
                return Err(crate::training::source::read_error("a", "disk gone"));
            }
            self.inner.read(volume, start, shape, image, labels)?;
            if self.short {
                labels.pop();
            }
            Ok(())
        }
    }

    fn flaky(fail_after: usize, short: bool) -> Trainer {
        let base = setup(2);
        let inner = InMemory::new(vec![setup_volume()]).unwrap();
        Trainer::with_source(
            base.cfg,
            Box::new(Flaky {
                inner,
                reads: 0,
                fail_after,
                short,
            }),
            base.coords.clone(),
        )
        .unwrap()
    }

    #[test]
    fn any_source_of_the_same_data_trains_identically() {
        let (mut a, mut b) = (setup(2), flaky(usize::MAX, false));
        let mut logits = vec![0.0; 2 * 125];
        for _ in 0..30 {
            let la = a.step_with(&mut logits, fake_net).unwrap();
            let lb = b.step_with(&mut logits, fake_net).unwrap();
            assert_eq!(la.to_bits(), lb.to_bits());
        }
        assert_eq!(a.save_state(), b.save_state());
        // Restoring reads the patches of the examples in flight from the source.
        let mut c = flaky(usize::MAX, false);
        c.load_state(&a.save_state()).unwrap();
        assert_eq!(c.save_state(), a.save_state());
        assert_eq!(c.source().name(0), "a");
    }

    #[test]
    fn a_failing_or_short_source_is_an_error_of_the_step() {
        let mut logits = vec![0.0; 2 * 125];
        let mut t = flaky(3, false);
        let err = (0..100)
            .find_map(|_| t.step_with(&mut logits, fake_net).err())
            .expect("the source fails after 3 reads");
        assert!(err.to_string().contains("disk gone"), "{err}");
        let err = flaky(usize::MAX, true)
            .step_with(&mut logits, fake_net)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("729 image and 728 label values for a patch of 729"),
            "{err}"
        );
    }
}
