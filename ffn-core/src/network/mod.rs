//! The FFN `convstack_3d` network: forward pass, loss and backward pass into one flat gradient.
//!
//! ```text
//! x = concat(image, seed)                          2 channels
//! h = relu(conv0_a(x)); x = conv0_b(h)             3x3x3, features F
//! repeat depth - 1 times:                          residual modules
//!     x = x + conv_b(relu(conv_a(relu(x))))
//! logits = seed + conv_lom(relu(x))                1x1x1, one channel
//! ```
//!
//! # Shapes
//! `image`, `seed`, `labels`, `out`/`logits`: `batch` FOVs, each `[z][y][x]` contiguous (FOV from the
//! config). Parameters and gradients: one flat buffer in [`crate::model_spec`] order, weights
//! `[kz, ky, kx, in, out]`. Internally every activation is a zero-bordered channels-last buffer
//! ([`crate::tensor::Padded`], border 1) owned by the network and reused between calls: after the
//! first call with a given batch size nothing is allocated.

use crate::conv::winograd::{self, ConvAlgorithm, Fusion, WinogradScratch};
use crate::conv::{Conv3dParams, Simd, bf16, fast, winograd2d, winograd3d};
use crate::error::CoreError;
use crate::layers;
use crate::model_spec::ModelConfig;
use crate::rng::Rng;
use crate::tensor::Padded;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

/// How the conv weights of a fresh network are drawn (biases start at zero either way).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WeightInit {
    /// Normal with this stddev, redrawn beyond two stddevs: what google/ffn's comment says its
    /// released FIB-25 model was trained from (stddev 0.01).
    TruncatedNormal(f32),
    /// Glorot (Xavier) uniform: `U(-a, a)` with `a = sqrt(6 / (fan_in + fan_out))`, fans counted
    /// over the kernel's voxels (`k^3 * in`, `k^3 * out`): what google/ffn's code does by default
    /// (`tf.contrib.layers.conv3d`'s initializer).
    GlorotUniform,
}

impl WeightInit {
    /// Fills `weights` of shape `[kz, ky, kx, in, out]` from `rng`, in order.
    pub fn fill(&self, shape: &[usize], weights: &mut [f32], rng: &mut Rng) {
        match *self {
            WeightInit::TruncatedNormal(stddev) => {
                for w in weights {
                    *w = rng.truncated_normal(stddev as f64) as f32;
                }
            }
            WeightInit::GlorotUniform => {
                let limit = glorot_limit(shape);
                for w in weights {
                    *w = ((2.0 * rng.next_f64() - 1.0) * limit) as f32;
                }
            }
        }
    }
}

/// Glorot's bound `sqrt(6 / (fan_in + fan_out))` for conv weights `[k.., in, out]`.
fn glorot_limit(shape: &[usize]) -> f64 {
    let (kernel, channels) = shape.split_at(shape.len() - 2);
    let receptive: usize = kernel.iter().product();
    let fans = receptive * (channels[0] + channels[1]);
    libm::sqrt(6.0 / fans as f64)
}

/// One conv layer: sizes and where its parameters live.
#[derive(Clone, Copy, Debug)]
struct Layer {
    kernel: usize,
    cin: usize,
    cout: usize,
    /// Offset of the weights; the biases follow them.
    offset: usize,
}

impl Layer {
    fn wlen(&self) -> usize {
        self.kernel.pow(3) * self.cin * self.cout
    }
    fn conv(&self, batch: usize, fov: [usize; 3]) -> Conv3dParams {
        Conv3dParams {
            batch,
            size: fov,
            kernel: self.kernel,
            in_channels: self.cin,
            out_channels: self.cout,
        }
    }
}

/// Buffers of one batch size. With `train`, every activation the backward pass needs is kept;
/// otherwise buffers are recycled layer after layer.
struct Workspace {
    batch: usize,
    train: bool,
    geom: Padded,
    input: Vec<f32>,
    h: Vec<f32>,
    xs: Vec<Vec<f32>>,
    rs: Vec<Vec<f32>>,
    us: Vec<Vec<f32>>,
    lom: Vec<f32>,
    /// Backward only: gradient buffers, flipped weights, per-thread weight-gradient partials.
    gx: Vec<f32>,
    ga: Vec<f32>,
    gb: Vec<f32>,
    glogits: Vec<f32>,
    glom: Vec<f32>,
    flipped: Vec<f32>,
    partials: Vec<f32>,
    /// Transformed inputs and weights of the Winograd convolutions.
    wino: WinogradScratch,
    /// Per layer: its weights prepared for the Winograd forward convs, kept while the parameters
    /// do not change ([`ConvStack3d::params_mut`] clears them).
    kept: Vec<KeptWeights>,
}

/// One layer's weights prepared for the F(4x4, 3x3) forward convs, each form made on first use.
#[derive(Clone, Debug, Default)]
struct KeptWeights {
    /// Transformed, float32.
    transformed: Vec<f32>,
    /// For the bfloat16 products.
    bf16: Option<bf16::PreparedWeights>,
}

impl KeptWeights {
    fn clear(&mut self) {
        self.transformed.clear();
        self.bf16 = None;
    }
}

/// How the Winograd forward convs of one pass run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WinogradForward {
    /// F(4, 3) along x.
    OneAxis,
    /// F(4x4, 3x3) over y and x, float32 products.
    TwoAxes,
    /// Direct bfloat16 products where they apply ([`bf16::applies`]), else F(4x4, 3x3).
    TwoAxesBf16,
    /// F(4x4, 3x3) over y and x and F(4, 3) along z ([`winograd3d`]).
    ThreeAxes,
}

impl WinogradForward {
    /// The forward convs of `algorithm` (a training pass computes bf16 as float32 F(4x4, 3x3)).
    fn of(algorithm: ConvAlgorithm, train: bool) -> Self {
        match algorithm {
            ConvAlgorithm::Direct | ConvAlgorithm::Winograd1d => Self::OneAxis,
            ConvAlgorithm::Winograd => Self::TwoAxes,
            ConvAlgorithm::Bf16 if train => Self::TwoAxes,
            ConvAlgorithm::Bf16 => Self::TwoAxesBf16,
            ConvAlgorithm::Winograd3d => Self::ThreeAxes,
        }
    }
}

impl Workspace {
    fn new(cfg: &ModelConfig, batch: usize, train: bool, max_wlen: usize) -> Self {
        let geom = Padded::new(batch, cfg.fov, 1);
        let f = cfg.features;
        let d = cfg.depth;
        let act = || vec![0.0f32; geom.len(f)];
        let (nx, nr, nu) = if train { (d, d, d - 1) } else { (2, 1, 1) };
        let g = |n: usize| if train { vec![0.0f32; n] } else { Vec::new() };
        Self {
            batch,
            train,
            geom,
            input: vec![0.0; geom.len(2)],
            h: act(),
            xs: (0..nx).map(|_| act()).collect(),
            rs: (0..nr).map(|_| act()).collect(),
            us: (0..nu).map(|_| act()).collect(),
            lom: vec![0.0; geom.len(1)],
            gx: g(geom.len(f)),
            ga: g(geom.len(f)),
            gb: g(geom.len(f)),
            glogits: g(geom.interior_voxels()),
            glom: g(geom.len(1)),
            flipped: g(max_wlen),
            partials: Vec::new(),
            wino: WinogradScratch::new(),
            kept: vec![KeptWeights::default(); 2 * d + 1],
        }
    }
}

/// `(&v[read], &mut v[write])` for two different indices.
fn pair(v: &mut [Vec<f32>], read: usize, write: usize) -> (&[f32], &mut [f32]) {
    assert_ne!(read, write);
    if read < write {
        let (a, b) = v.split_at_mut(write);
        (&a[read], &mut b[0])
    } else {
        let (a, b) = v.split_at_mut(read);
        (&b[0], &mut a[write])
    }
}

/// The `convstack_3d` network with its parameters and reusable buffers.
pub struct ConvStack3d {
    cfg: ModelConfig,
    params: Vec<f32>,
    layers: Vec<Layer>,
    ws: Option<Workspace>,
    algorithm: ConvAlgorithm,
    simd: Simd,
}

impl core::fmt::Debug for ConvStack3d {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ConvStack3d")
            .field("cfg", &self.cfg)
            .field("num_params", &self.params.len())
            .finish_non_exhaustive()
    }
}

impl ConvStack3d {
    /// A network with truncated-normal weights (stddev `init_stddev`, redrawn beyond two
    /// stddevs) and zero biases, drawn from `rng` in parameter order: one seed, one network.
    ///
    /// # Panics
    /// When `cfg` is invalid ([`ModelConfig::validate`]); use [`ConvStack3d::from_params`] for
    /// configurations that come from users.
    pub fn new(cfg: ModelConfig, init_stddev: f32, rng: &mut Rng) -> Self {
        Self::with_init(cfg, WeightInit::TruncatedNormal(init_stddev), rng)
    }

    /// A network whose weights are drawn by `init` from `rng` in parameter order, with zero
    /// biases: one seed, one network.
    ///
    /// # Panics
    /// When `cfg` is invalid ([`ModelConfig::validate`]).
    pub fn with_init(cfg: ModelConfig, init: WeightInit, rng: &mut Rng) -> Self {
        if let Err(e) = cfg.validate() {
            panic!("ConvStack3d::with_init: {e}");
        }
        let mut params = vec![0.0f32; cfg.num_params()];
        for spec in cfg.param_specs() {
            if spec.shape.len() == 5 {
                let weights = &mut params[spec.offset..spec.offset + spec.len()];
                init.fill(&spec.shape, weights, rng);
            }
        }
        Self::build(cfg, params)
    }

    /// A network with the given flat parameters (model_spec order).
    ///
    /// # Errors
    /// [`CoreError::InvalidConfig`] for an invalid `cfg`; [`CoreError::LengthMismatch`] when
    /// `params` does not have `cfg.num_params()` values.
    pub fn from_params(cfg: ModelConfig, params: Vec<f32>) -> Result<Self, CoreError> {
        cfg.validate().map_err(CoreError::InvalidConfig)?;
        let expected = cfg.num_params();
        if params.len() != expected {
            return Err(CoreError::LengthMismatch {
                what: format!(
                    "parameters of a convstack_3d (depth {}, {} features)",
                    cfg.depth, cfg.features
                ),
                expected,
                actual: params.len(),
            });
        }
        Ok(Self::build(cfg, params))
    }

    fn build(cfg: ModelConfig, params: Vec<f32>) -> Self {
        let mut layers = Vec::new();
        let mut offset = 0;
        for l in cfg.conv_layers() {
            let layer = Layer {
                kernel: l.kernel,
                cin: l.in_channels,
                cout: l.out_channels,
                offset,
            };
            offset += layer.wlen() + layer.cout;
            layers.push(layer);
        }
        debug_assert_eq!(offset, params.len());
        Self {
            cfg,
            params,
            layers,
            ws: None,
            algorithm: ConvAlgorithm::default(),
            simd: Simd::active(),
        }
    }

    /// How the 3x3x3 convolutions of the forward pass and of the input gradients are computed
    /// (default [`ConvAlgorithm::Winograd3d`]).
    pub fn conv_algorithm(&self) -> ConvAlgorithm {
        self.algorithm
    }

    /// Chooses the convolution algorithm (see [`ConvAlgorithm`]).
    pub fn set_conv_algorithm(&mut self, algorithm: ConvAlgorithm) {
        self.algorithm = algorithm;
    }

    /// The SIMD kernels the convs run (default [`Simd::active`] when the network was built;
    /// [`Simd::usable`] of it runs).
    pub fn simd(&self) -> Simd {
        self.simd
    }

    /// Chooses the SIMD kernels (see [`Simd`]); a level this CPU lacks runs the widest one below
    /// it. AVX2 and AVX-512 give the same bits; the portable path differs in rounding.
    pub fn set_simd(&mut self, simd: Simd) {
        self.simd = simd;
    }

    /// Whether conv `p` runs through Winograd (the algorithm chosen and Winograd faster here).
    fn winograd(&self, p: &Conv3dParams) -> bool {
        self.algorithm != ConvAlgorithm::Direct && winograd::preferred(p, self.simd)
    }

    /// One forward conv of layer `l` with this network's algorithm:
    /// `out = residual + act(conv(relu?(input)) + bias)`, the element-wise work fused into the
    /// Winograd passes or done separately on the direct path.
    #[allow(clippy::too_many_arguments)]
    fn conv_forward(
        &self,
        (wino, kept): (&mut WinogradScratch, &mut KeptWeights),
        l: &Layer,
        g: &Padded,
        input: &[f32],
        relu_input: bool,
        relu: bool,
        residual: Option<&[f32]>,
        axes: WinogradForward,
        out: &mut [f32],
    ) {
        let p = l.conv(g.batch, g.size);
        let w = &self.params[l.offset..l.offset + l.wlen()];
        let b = &self.params[l.offset + l.wlen()..][..l.cout];
        if self.winograd(&p) {
            let fusion = Fusion {
                relu_input,
                bias: Some(b),
                relu,
                residual,
            };
            if axes != WinogradForward::OneAxis {
                if axes == WinogradForward::TwoAxesBf16 && bf16::applies(&p) {
                    let prepared = kept
                        .bf16
                        .get_or_insert_with(|| bf16::PreparedWeights::new(&p, w));
                    let prepared = Some(&*prepared);
                    bf16::forward_fused(self.simd, &p, g, input, w, prepared, fusion, out, wino);
                } else {
                    // The three-axis weights start with the two-axis ones: either pass takes
                    // what the other kept.
                    let three = axes == WinogradForward::ThreeAxes;
                    let need = if three {
                        winograd3d::transformed_weights_len(&p)
                    } else {
                        winograd2d::transformed_weights_len(&p)
                    };
                    let transformed = &mut kept.transformed;
                    if transformed.len() < need {
                        transformed.resize(need, 0.0);
                        if three {
                            winograd3d::transform_weights(&p, w, transformed);
                        } else {
                            winograd2d::transform_weights(&p, w, transformed);
                        }
                    }
                    let tw = Some(&transformed[..need]);
                    let forward = if three {
                        winograd3d::forward_fused_with
                    } else {
                        winograd2d::forward_fused_with
                    };
                    forward(self.simd, &p, g, input, w, tw, fusion, out, wino);
                }
            } else {
                winograd::forward_fused(self.simd, &p, g, input, w, fusion, out, wino);
            }
        } else {
            assert!(
                !relu_input,
                "conv_forward: input ReLU is fused only with Winograd"
            );
            fast::forward(self.simd, &p, g, input, w, b, relu, out);
            if let Some(r) = residual {
                layers::add_assign(out, r);
            }
        }
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The flat parameters, model_spec order.
    pub fn params(&self) -> &[f32] {
        &self.params
    }

    /// The flat parameters, for optimisers and for loading weights.
    pub fn params_mut(&mut self) -> &mut [f32] {
        if let Some(ws) = &mut self.ws {
            ws.kept.iter_mut().for_each(KeptWeights::clear);
        }
        &mut self.params
    }

    /// Voxels of one FOV.
    pub fn fov_voxels(&self) -> usize {
        self.cfg.fov.iter().product()
    }

    /// Frees the activation buffers (they are allocated again by the next call).
    pub fn release_buffers(&mut self) {
        self.ws = None;
    }

    fn workspace(&mut self, batch: usize, train: bool) -> Workspace {
        match self.ws.take() {
            Some(ws) if ws.batch == batch && (ws.train || !train) => ws,
            _ => {
                self.ws = None; // free the old buffers before allocating new ones
                let max_wlen = self.layers.iter().map(Layer::wlen).max().unwrap_or(0);
                Workspace::new(&self.cfg, batch, train, max_wlen)
            }
        }
    }

    fn check_len(&self, what: &str, len: usize, batch: usize) {
        let want = batch * self.fov_voxels();
        assert_eq!(
            len, want,
            "ConvStack3d: {what} has {len} values, expected batch {batch} x FOV"
        );
    }

    /// Forward pass: `out = seed + update(image, seed)`, logits of `batch` FOVs.
    ///
    /// # Panics
    /// When a buffer does not hold `batch` FOVs.
    pub fn forward(&mut self, image: &[f32], seed: &[f32], batch: usize, out: &mut [f32]) {
        self.check_len("image", image.len(), batch);
        self.check_len("seed", seed.len(), batch);
        self.check_len("out", out.len(), batch);
        let mut ws = self.workspace(batch, false);
        self.forward_ws(&mut ws, false, image, seed, out);
        self.ws = Some(ws);
    }

    /// The forward pass in `ws`: for a training step when `train` (which needs a training
    /// workspace), else for inference (in any workspace).
    fn forward_ws(
        &self,
        ws: &mut Workspace,
        train: bool,
        image: &[f32],
        seed: &[f32],
        out: &mut [f32],
    ) {
        let g = ws.geom;
        let d = self.cfg.depth;
        // Inference keeps no relu(x) for a backward pass: Winograd reads x through a fused ReLU.
        let fuse_relu = !ws.train && self.algorithm != ConvAlgorithm::Direct;
        let axes = WinogradForward::of(self.algorithm, train);
        let (wino, tws) = (&mut ws.wino, &mut ws.kept);
        layers::concat2_padded(&g, image, seed, &mut ws.input);
        let (l0, l1) = (&self.layers[0], &self.layers[1]);
        self.conv_forward(
            (&mut *wino, &mut tws[0]),
            l0,
            &g,
            &ws.input,
            false,
            true,
            None,
            axes,
            &mut ws.h,
        );
        self.conv_forward(
            (&mut *wino, &mut tws[1]),
            l1,
            &g,
            &ws.h,
            false,
            false,
            None,
            axes,
            &mut ws.xs[0],
        );
        let (nx, nr, nu) = (ws.xs.len(), ws.rs.len(), ws.us.len());
        for m in 1..d {
            let (xi, ri, ui) = ((m - 1) % nx, (m - 1) % nr, (m - 1) % nu);
            let (la, lb) = (&self.layers[2 * m], &self.layers[2 * m + 1]);
            if fuse_relu && self.winograd(&la.conv(g.batch, g.size)) {
                self.conv_forward(
                    (&mut *wino, &mut tws[2 * m]),
                    la,
                    &g,
                    &ws.xs[xi],
                    true,
                    true,
                    None,
                    axes,
                    &mut ws.us[ui],
                );
            } else {
                layers::relu(&ws.xs[xi], &mut ws.rs[ri]);
                self.conv_forward(
                    (&mut *wino, &mut tws[2 * m]),
                    la,
                    &g,
                    &ws.rs[ri],
                    false,
                    true,
                    None,
                    axes,
                    &mut ws.us[ui],
                );
            }
            let (prev, next) = pair(&mut ws.xs, xi, m % nx);
            self.conv_forward(
                (&mut *wino, &mut tws[2 * m + 1]),
                lb,
                &g,
                &ws.us[ui],
                false,
                false,
                Some(prev),
                axes,
                next,
            );
        }
        let rl = (d - 1) % nr;
        layers::relu(&ws.xs[(d - 1) % nx], &mut ws.rs[rl]);
        let lom = &self.layers[2 * d];
        self.conv_forward(
            (&mut *wino, &mut tws[2 * d]),
            lom,
            &g,
            &ws.rs[rl],
            false,
            false,
            None,
            axes,
            &mut ws.lom,
        );
        g.unpad_into(&ws.lom, 1, out);
        out.iter_mut().zip(seed).for_each(|(o, s)| *o += s);
    }

    /// Forward pass, mean sigmoid cross-entropy against soft `labels`, and backward pass.
    ///
    /// Writes the logits (`seed + update`) into `logits` and the gradient of the mean loss with
    /// respect to every parameter into `grads` (overwritten, model_spec order). Returns the mean
    /// loss over all voxels of the batch.
    ///
    /// # Panics
    /// When a buffer does not hold `batch` FOVs or `grads` is not as long as the parameters.
    pub fn forward_backward(
        &mut self,
        image: &[f32],
        seed: &[f32],
        labels: &[f32],
        batch: usize,
        logits: &mut [f32],
        grads: &mut [f32],
    ) -> f32 {
        // One backward implementation serves both entry points; `NoHook` ignores the notifications.
        let mut no_hook = grad_hooks::NoHook;
        self.forward_backward_with_hook(image, seed, labels, batch, logits, grads, &mut no_hook)
    }

    /// Backward of one conv layer: weight gradient, and the input gradient into `gin` if given.
    #[allow(clippy::too_many_arguments)]
    fn conv_backward(
        &self,
        ws_parts: (&mut Vec<f32>, &mut Vec<f32>, &mut WinogradScratch),
        l: &Layer,
        g: &Padded,
        input: &[f32],
        gout: &[f32],
        gin: Option<&mut [f32]>,
        grads: &mut [f32],
    ) {
        let (flipped, partials, wino) = ws_parts;
        let p = l.conv(g.batch, g.size);
        let (gw, rest) = grads[l.offset..].split_at_mut(l.wlen());
        let gb = &mut rest[..l.cout];
        if self.winograd(&p) && self.algorithm.two_axes() {
            winograd2d::backward_weights(self.simd, &p, g, input, gout, gw, gb, wino);
        } else if self.winograd(&p) {
            winograd::backward_weights(self.simd, &p, g, input, gout, gw, gb, wino);
        } else {
            fast::backward_weights(self.simd, &p, g, input, gout, gw, gb, partials);
        }
        if let Some(gin) = gin {
            let w = &self.params[l.offset..l.offset + l.wlen()];
            let f = &mut flipped[..l.wlen()];
            fast::flip_weights(&p, w, f);
            let back = Conv3dParams {
                in_channels: p.out_channels,
                out_channels: p.in_channels,
                ..p
            };
            let plain = Fusion::default();
            if self.winograd(&back) && self.algorithm == ConvAlgorithm::Winograd3d {
                winograd3d::forward_fused(self.simd, &back, g, gout, f, plain, gin, wino);
            } else if self.winograd(&back) && self.algorithm.two_axes() {
                winograd2d::forward_fused(self.simd, &back, g, gout, f, plain, gin, wino);
            } else if self.winograd(&back) {
                winograd::forward(self.simd, &back, g, gout, f, None, false, gin, wino);
            } else {
                fast::backward_input(self.simd, &p, g, gout, f, gin);
            }
        }
    }
}

/// Analytic FLOP counts (2 per multiply-add) of one FOV, the convention of the PyTorch peer's
/// `analytic_flops`: every conv with the full kernel at every voxel (zero-padded taps counted);
/// training = forward + weight gradients of every conv + input gradients of all but the first.
/// Element-wise work is not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flops {
    /// Forward pass of one FOV.
    pub forward: u64,
    /// Training step (forward + backward) of one example.
    pub train: u64,
}

/// FLOPs of `cfg` per FOV, see [`Flops`].
pub fn analytic_flops(cfg: &ModelConfig) -> Flops {
    let v: u64 = cfg.fov.iter().map(|&s| s as u64).product();
    let f = cfg.features as u64;
    let first = v * 27 * 2 * f;
    let n_ff = 1 + 2 * (cfg.depth as u64 - 1);
    let mid = v * 27 * f * f * n_ff;
    let lom = v * f;
    let fwd = first + mid + lom;
    let bwd = fwd + mid + lom;
    Flops {
        forward: 2 * fwd,
        train: 2 * (fwd + bwd),
    }
}

pub mod deepen;
pub mod grad_hooks;

#[cfg(test)]
mod tests;
