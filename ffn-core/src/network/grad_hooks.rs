//! Backward pass with notifications: [`ConvStack3d::forward_backward_with_hook`] computes exactly
//! what [`ConvStack3d::forward_backward`] computes (bit for bit) and tells a [`GradHook`] as soon as
//! each layer's weight and bias gradients are final, so that a data-parallel trainer can start
//! reducing them while the backward pass still works on earlier layers (communication overlap).
//!
//! Layers finish in reverse order: `conv_lom` first, `conv0_a` last. Each notification covers one
//! layer's weights and biases, a contiguous range of the flat gradient ([`crate::model_spec`]
//! order); [`ConvStack3d::grad_ready_order`] lists the ranges in the order they are reported.

use super::{ConvStack3d, Layer, Workspace};
use crate::layers;
use crate::loss;
use alloc::vec::Vec;
use core::ops::Range;

/// Receives the progress of [`ConvStack3d::forward_backward_with_hook`].
pub trait GradHook {
    /// The forward pass and the loss are done (`loss`: the mean loss of the batch); the backward
    /// pass starts next.
    fn forward_done(&mut self, loss: f32) {
        let _ = loss;
    }

    /// `grads[range]` (passed as `values`) is final: no later part of the backward pass writes it.
    fn ready(&mut self, range: Range<usize>, values: &[f32]);
}

/// A hook that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHook;

impl GradHook for NoHook {
    fn ready(&mut self, _range: Range<usize>, _values: &[f32]) {}
}

impl Layer {
    fn grad_range(&self) -> Range<usize> {
        self.offset..self.offset + self.wlen() + self.cout
    }
}

impl ConvStack3d {
    /// The gradient ranges (one per conv layer: weights then biases) in the order
    /// [`ConvStack3d::forward_backward_with_hook`] reports them: last layer first.
    pub fn grad_ready_order(&self) -> Vec<Range<usize>> {
        self.layers.iter().rev().map(Layer::grad_range).collect()
    }

    /// [`ConvStack3d::forward_backward`], calling `hook.forward_done` after the loss and
    /// `hook.ready` as each layer's gradient becomes final (see the module docs). The logits,
    /// gradient and loss are bitwise identical to `forward_backward`'s.
    ///
    /// # Panics
    /// As [`ConvStack3d::forward_backward`].
    #[allow(clippy::too_many_arguments)]
    pub fn forward_backward_with_hook(
        &mut self,
        image: &[f32],
        seed: &[f32],
        labels: &[f32],
        batch: usize,
        logits: &mut [f32],
        grads: &mut [f32],
        hook: &mut dyn GradHook,
    ) -> f32 {
        self.check_len("image", image.len(), batch);
        self.check_len("seed", seed.len(), batch);
        self.check_len("labels", labels.len(), batch);
        self.check_len("logits", logits.len(), batch);
        assert_eq!(grads.len(), self.params.len(), "ConvStack3d: grads length");
        let mut ws = self.workspace(batch, true);
        self.forward_ws(&mut ws, true, image, seed, logits);
        let loss = loss::sigmoid_ce_mean_grad(logits, labels, &mut ws.glogits);
        hook.forward_done(loss);
        self.backward_ws_hooked(&mut ws, grads, hook);
        self.ws = Some(ws);
        loss
    }

    /// The backward pass of the network (the only one: `forward_backward` comes here with
    /// [`NoHook`]), with a notification after each layer's gradient is final.
    fn backward_ws_hooked(&self, ws: &mut Workspace, grads: &mut [f32], hook: &mut dyn GradHook) {
        let g = ws.geom;
        let d = self.cfg.depth;
        let mut done = |l: &Layer, grads: &[f32]| {
            let r = l.grad_range();
            hook.ready(r.clone(), &grads[r]);
        };
        g.pad_from(&ws.glogits, 1, &mut ws.glom);
        let parts = (&mut ws.flipped, &mut ws.partials, &mut ws.wino);
        let lom = &self.layers[2 * d];
        self.conv_backward(
            parts,
            lom,
            &g,
            &ws.rs[d - 1],
            &ws.glom,
            Some(&mut ws.gx),
            grads,
        );
        done(lom, grads);
        layers::relu_backward(&ws.xs[d - 1], &mut ws.gx);
        for m in (1..d).rev() {
            let parts = (&mut ws.flipped, &mut ws.partials, &mut ws.wino);
            let lb = &self.layers[2 * m + 1];
            self.conv_backward(
                parts,
                lb,
                &g,
                &ws.us[m - 1],
                &ws.gx,
                Some(&mut ws.ga),
                grads,
            );
            done(lb, grads);
            layers::relu_backward(&ws.us[m - 1], &mut ws.ga);
            let parts = (&mut ws.flipped, &mut ws.partials, &mut ws.wino);
            let la = &self.layers[2 * m];
            self.conv_backward(
                parts,
                la,
                &g,
                &ws.rs[m - 1],
                &ws.ga,
                Some(&mut ws.gb),
                grads,
            );
            done(la, grads);
            layers::add_relu_backward(&mut ws.gx, &ws.gb, &ws.xs[m - 1]);
        }
        let parts = (&mut ws.flipped, &mut ws.partials, &mut ws.wino);
        let l1 = &self.layers[1];
        self.conv_backward(parts, l1, &g, &ws.h, &ws.gx, Some(&mut ws.ga), grads);
        done(l1, grads);
        layers::relu_backward(&ws.h, &mut ws.ga);
        let parts = (&mut ws.flipped, &mut ws.partials, &mut ws.wino);
        let l0 = &self.layers[0];
        self.conv_backward(parts, l0, &g, &ws.input, &ws.ga, None, grads);
        done(l0, grads);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_spec::ModelConfig;
    use crate::rng::Rng;
    use alloc::vec;

    /// Records every notification with a copy of the values it was given.
    #[derive(Default)]
    struct Recorder {
        loss: Option<f32>,
        seen: Vec<(Range<usize>, Vec<f32>)>,
    }

    impl GradHook for Recorder {
        fn forward_done(&mut self, loss: f32) {
            assert!(self.seen.is_empty(), "forward_done after a gradient");
            self.loss = Some(loss);
        }
        fn ready(&mut self, range: Range<usize>, values: &[f32]) {
            assert_eq!(range.len(), values.len());
            self.seen.push((range, values.to_vec()));
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn hooked_pass_is_bitwise_the_plain_one_and_reports_final_ranges_in_order() {
        for depth in [1, 3] {
            let cfg = ModelConfig {
                depth,
                features: 4,
                fov: [5, 7, 5],
                deltas: [1, 1, 1],
            };
            let mut rng = Rng::new(3);
            let mut net = ConvStack3d::new(cfg, 0.1, &mut rng);
            let batch = 2;
            let n = batch * net.fov_voxels();
            let image: Vec<f32> = (0..n).map(|_| rng.next_f32() - 0.5).collect();
            let seed: Vec<f32> = (0..n).map(|_| rng.next_f32() - 0.5).collect();
            let labels: Vec<f32> = (0..n)
                .map(|_| if rng.next_f32() < 0.5 { 0.05 } else { 0.95 })
                .collect();
            let (mut l1, mut g1) = (vec![0.0; n], vec![0.0; net.params().len()]);
            let loss1 = net.forward_backward(&image, &seed, &labels, batch, &mut l1, &mut g1);
            let (mut l2, mut g2) = (vec![0.0; n], vec![f32::NAN; net.params().len()]);
            let mut rec = Recorder::default();
            let loss2 = net.forward_backward_with_hook(
                &image, &seed, &labels, batch, &mut l2, &mut g2, &mut rec,
            );
            assert_eq!(loss1.to_bits(), loss2.to_bits());
            assert_eq!(rec.loss.map(f32::to_bits), Some(loss1.to_bits()));
            assert_eq!(bits(&l1), bits(&l2));
            assert_eq!(bits(&g1), bits(&g2));
            // One notification per layer, in the announced order, covering everything once,
            // and what was reported is what the gradient holds at the end.
            let order: Vec<Range<usize>> = rec.seen.iter().map(|(r, _)| r.clone()).collect();
            assert_eq!(order, net.grad_ready_order());
            assert_eq!(order.len(), 2 * depth + 1);
            assert_eq!(order.first().map(|r| r.end), Some(g1.len()));
            assert_eq!(order.last().map(|r| r.start), Some(0));
            for w in order.windows(2) {
                assert_eq!(
                    w[1].end, w[0].start,
                    "ranges are contiguous, last layer first"
                );
            }
            for (r, v) in &rec.seen {
                assert_eq!(
                    bits(v),
                    bits(&g1[r.clone()]),
                    "range {r:?} changed after it was reported"
                );
            }
            // The plain hook does nothing.
            let loss3 = net.forward_backward_with_hook(
                &image,
                &seed,
                &labels,
                batch,
                &mut l2,
                &mut g2,
                &mut NoHook,
            );
            assert_eq!(loss3.to_bits(), loss1.to_bits());
        }
    }
}
