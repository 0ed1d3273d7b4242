"""Writes the golden fixture of ffn-core's network test from the independent PyTorch model.

Command (from the repository root; the venv needs torch and numpy):

    ~/peer-venv/bin/python scripts/golden/make_golden.py /work/shared/peers ffn-core/tests/golden

Model: ffn_torch.ConvStack3D(depth=2, features=4), FOV 9^3, batch 2, run in float64 with
float32-representable weights and inputs, so that the expected values carry no float32 rounding
of their own. Weights: truncated normal (std 0.15, cut at 2 std) from torch.manual_seed(1234);
biases uniform in [-0.05, 0.05]. Inputs: ffn_torch.make_batch(2, fov=(9, 9, 9), seed=0).

Files (raw little-endian float32, ffn-rs layouts):
  params.f32  flat parameters in ffn-rs model_spec order, weights [kz, ky, kx, in, out]
  image.f32, seed.f32, labels.f32, logits.f32: [batch, z, y, x]
  loss.f32    one value, mean sigmoid cross-entropy
  grads.f32   gradient of the loss, same order and layout as params.f32
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

peers, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, peers)
from ffn_torch import ConvStack3D, make_batch  # noqa: E402

DEPTH, FEATURES, FOV, BATCH = 2, 4, (9, 9, 9), 2

torch.manual_seed(1234)
model = ConvStack3D(depth=DEPTH, features=FEATURES)
with torch.no_grad():
    for m in model.modules():
        if isinstance(m, torch.nn.Conv3d):
            torch.nn.init.trunc_normal_(m.weight, std=0.15, a=-0.3, b=0.3)
            m.bias.uniform_(-0.05, 0.05)
model = model.double()

image, seed, labels = (t.double() for t in make_batch(BATCH, fov=FOV, seed=0))
logits = model(image, seed)
loss = F.binary_cross_entropy_with_logits(logits, labels)
loss.backward()

# ffn-rs parameter order: conv0_a, conv0_b, conv1_a, conv1_b, ..., conv_lom; weights then biases.
convs = [model.conv0_a, model.conv0_b]
for a, b in zip(model.res_a, model.res_b):
    convs += [a, b]
convs.append(model.conv_lom)


def flat(get):
    parts = []
    for c in convs:
        # PyTorch [out, in, kz, ky, kx] -> ffn-rs / TensorFlow [kz, ky, kx, in, out].
        parts.append(get(c.weight).permute(2, 3, 4, 1, 0).reshape(-1))
        parts.append(get(c.bias).reshape(-1))
    return torch.cat(parts)


def save(name, t):
    np.asarray(t.detach().reshape(-1).numpy(), dtype="<f4").tofile(os.path.join(out, name))


os.makedirs(out, exist_ok=True)
save("params.f32", flat(lambda p: p))
save("grads.f32", flat(lambda p: p.grad))
# [N, 1, Z, Y, X] has the same flat order as ffn-rs [N, z, y, x].
save("image.f32", image)
save("seed.f32", seed)
save("labels.f32", labels)
save("logits.f32", logits)
save("loss.f32", loss.reshape(1))
print(f"loss {loss.item():.8f}, {sum(p.numel() for p in model.parameters())} parameters -> {out}")
