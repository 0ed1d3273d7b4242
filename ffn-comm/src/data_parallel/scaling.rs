//! The measurement behind `ffn bench scaling`: one rank's training steps on synthetic examples,
//! timed phase by phase ([`measure_rank`]), and a least-squares fit of the allreduce cost
//! `t = a + b * bytes` on the group ([`fit_allreduce`]); [`ring_allreduce_seconds`] projects it to
//! more ranks.

use std::time::Instant;

use anyhow::Result;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_core::optim::{Optimizer, Sgd};
use ffn_core::rng::Rng;
use ffn_core::synth::{SynthConfig, generate};
use ffn_core::training::coordinates::Coordinate;
use ffn_core::training::examples::ExampleConfig;
use ffn_core::training::schedule::LrSchedule;
use ffn_core::training::step::{StepBuffers, StepOptions};
use ffn_core::training::trainer::{Trainer, TrainerConfig, TrainingVolume};
use serde_json::{Value, json};

use super::DataParallel;
use super::step::Phases;

/// What one measurement runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalingOptions {
    /// The network.
    pub model: ModelConfig,
    /// Examples per step and rank.
    pub batch: usize,
    /// Untimed steps first.
    pub warmup: usize,
    /// Timed steps (medians are reported).
    pub steps: usize,
}

/// The median (0 for no values).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// Trains `warmup + steps` steps on synthetic examples as one rank of `dist` (collective); rank 0
/// returns the medians of the phases (and, with more than one rank, the fitted allreduce cost).
pub fn measure_rank(o: &ScalingOptions, dist: &DataParallel) -> Result<Option<Value>> {
    let cfg = &o.model;
    let ex = ExampleConfig::new(cfg.fov, cfg.deltas);
    let patch = ex.patch_shape();
    let shape = patch.map(|p| p + 6);
    let v = generate(&SynthConfig {
        shape,
        neurites: 8,
        ..SynthConfig::default()
    })
    .map_err(|e| anyhow::anyhow!("synthetic volume: {e}"))?;
    let image = v.image.mapv(|g| (g as f32 - 128.0) / 33.0);
    let vols = vec![TrainingVolume {
        name: "synth".into(),
        image,
        labels: v.labels,
    }];
    let c = patch.map(|p| (p / 2) as u32);
    let coords: Vec<Coordinate> = (0..27u32)
        .map(|i| Coordinate {
            volume: 0,
            zyx: [c[0] + 1 + i % 3, c[1] + 1 + (i / 3) % 3, c[2] + 1 + i / 9],
        })
        .collect();
    let mut trainer = Trainer::new(
        dist.trainer_config(TrainerConfig::new(ex, o.batch, 1)),
        vols,
        coords,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut net = ConvStack3d::new(*cfg, 0.01, &mut Rng::new(1));
    let mut opt = Sgd;
    dist.broadcast_initial(&mut net, &mut opt, 0)?;
    let mut bufs = StepBuffers::new(&net, &trainer);
    let opts = StepOptions {
        schedule: LrSchedule::constant(1e-4),
        clip: Some(0.7),
    };
    let mut phases = Vec::new();
    for i in 0..o.warmup + o.steps {
        dist.step(&mut trainer, &mut net, &mut bufs, &opts, |p, g, lr| {
            opt.step(p, g, lr)
        })?;
        if i >= o.warmup {
            phases.push(dist.last_phases());
        }
    }
    let med = |f: fn(&Phases) -> f64| median(phases.iter().map(f).collect());
    let comm_model = if dist.size() > 1 {
        Some(fit_allreduce(dist)?)
    } else {
        None
    };
    let last_bucket = net.grad_ready_order().last().map_or(0, |r| r.len()) * 4;
    if !dist.is_root() {
        return Ok(None);
    }
    Ok(Some(json!({
        "ranks": dist.size(),
        "step_s": med(|p| p.total),
        "prepare_s": med(|p| p.prepare),
        "forward_s": med(|p| p.forward),
        "backward_s": med(|p| p.backward),
        "exposed_comm_s": med(|p| p.wait),
        "compute_s": med(|p| p.total - p.wait),
        "optimizer_s": med(|p| p.optimizer),
        "comm_busy_s": med(|p| p.comm_busy),
        "gradient_bytes": net.params().len() * 4,
        "last_bucket_bytes": last_bucket,
        "allreduce_fit": comm_model,
    })))
}

/// Times allreduces of several sizes and fits `t = a + b * bytes` (least squares on medians).
pub fn fit_allreduce(dist: &DataParallel) -> Result<Value> {
    let sizes = [1usize, 256, 4096, 65536, 262_144, 1 << 20];
    let mut points = Vec::new();
    for &floats in &sizes {
        let reps = if floats >= 1 << 18 { 5 } else { 20 };
        let mut times = Vec::new();
        let mut buf = vec![1.0f32; floats];
        for _ in 0..reps + 2 {
            let t = Instant::now();
            buf = dist.sum(buf)?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.drain(..2);
        points.push(((floats * 4) as f64, median(times)));
    }
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let b = (sxy / sxx).max(1e-15);
    let a0 = (my - b * mx).max(points[0].1.min(my));
    Ok(
        json!({ "a_s": a0, "b_s_per_byte": b, "points": points.iter().map(|(x, y)| json!([x, y])).collect::<Vec<_>>() }),
    )
}

/// Ring allreduce time of `bytes` on `p` ranks with latency `alpha` (s per step) and bandwidth
/// `bw` (bytes/s).
pub fn ring_allreduce_seconds(alpha: f64, bw: f64, p: usize, bytes: f64) -> f64 {
    let p = p as f64;
    2.0 * (p - 1.0) * alpha + 2.0 * (p - 1.0) / p * bytes / bw
}

/// The weak-scaling table of `runs` (the [`measure_rank`] results, the first the baseline): per
/// run its step time, examples/s (`batch` per rank), efficiency against the baseline, compute and
/// exposed communication; the communication model fitted on the largest multi-rank run
/// (`alpha_s` latency and `bandwidth` in bytes/s override the fit); and the projection of the
/// exposed allreduce to 16..2048 ranks (with `overlap`, only what backward does not hide).
pub fn weak_scaling_summary(
    runs: &[Value],
    batch: usize,
    overlap: bool,
    alpha_s: Option<f64>,
    bandwidth: Option<f64>,
) -> (Vec<Value>, Value, Vec<Value>) {
    let g = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let base = &runs[0];
    let t1 = g(base, "step_s");
    let rows: Vec<Value> = runs
        .iter()
        .map(|r| {
            let (t, n) = (g(r, "step_s"), g(r, "ranks"));
            // Weak scaling: the same work per rank, so efficiency = T_step(baseline) / T_step(n).
            let eff = if t > 0.0 { t1 / t } else { 0.0 };
            json!({
                "ranks": r["ranks"], "step_s": t, "examples_per_s": n * batch as f64 / t.max(1e-12),
                "efficiency": eff,
                "compute_s": g(r, "compute_s"),
                "exposed_comm_s": g(r, "exposed_comm_s").max(0.0), "comm_busy_s": g(r, "comm_busy_s").max(0.0),
                "phases": {"prepare_s": r["prepare_s"], "forward_s": r["forward_s"], "backward_s": r["backward_s"], "wait_s": r["exposed_comm_s"], "optimizer_s": r["optimizer_s"]},
            })
        })
        .collect();
    // The comm model from the largest multi-rank run.
    let fit = runs
        .iter()
        .rev()
        .find(|r| r.get("allreduce_fit").is_some_and(|f| !f.is_null()));
    let mut model = Value::Null;
    let mut projection = Vec::new();
    if let Some(r) = fit {
        let p = g(r, "ranks").max(2.0);
        let f = &r["allreduce_fit"];
        let alpha = alpha_s.unwrap_or(g(f, "a_s") / (2.0 * (p - 1.0)));
        let bw = bandwidth.unwrap_or(2.0 * (p - 1.0) / p / g(f, "b_s_per_byte"));
        let (s, last) = (g(r, "gradient_bytes"), g(r, "last_bucket_bytes"));
        let bwd = g(base, "backward_s");
        for pr in [16usize, 32, 64, 128, 256, 512, 1024, 2048] {
            let t = ring_allreduce_seconds(alpha, bw, pr, s);
            let exposed = if !overlap {
                t
            } else {
                ring_allreduce_seconds(alpha, bw, pr, last).max(t - bwd)
            };
            projection.push(json!({"ranks": pr, "allreduce_s": t, "exposed_s": exposed, "efficiency": t1 / (t1 + exposed)}));
        }
        model = json!({
            "alpha_s": alpha, "bandwidth_bytes_per_s": bw, "measured_at_ranks": p as usize,
            "alpha_source": if alpha_s.is_some() { "--alpha-us" } else { "measured" },
            "bandwidth_source": if bandwidth.is_some() { "--bandwidth-gbs" } else { "measured" },
            "formula": "t_allreduce(P,S) = 2(P-1) alpha + 2(P-1)/P * S/B (ring); exposed(P) = max(t(P, S_last_bucket), t(P, S_gradient) - T_backward(1 rank)); efficiency(P) = T_step(1 rank) / (T_step(1 rank) + exposed(P))",
            "fit": r["allreduce_fit"],
        });
    }
    (rows, model, projection)
}
