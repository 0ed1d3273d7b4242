#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets into fuzz/corpus/NAME/ (small valid inputs, by hand
or from the repository's test data). Run from anywhere: python3 fuzz/seed_corpus.py"""
import json
import os
import struct
import zlib

FUZZ = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(FUZZ)


def put(target, name, data):
    d = os.path.join(FUZZ, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def safetensors(tensors, meta):
    header, blob = {"__metadata__": meta}, b""
    for name, shape, values in tensors:
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def checkpoints():
    # depth 1, 1 feature: conv0_a [3,3,3,2,1], conv0_b [3,3,3,1,1], conv_lom [1,1,1,1,1].
    shapes = [("conv0_a", [3, 3, 3, 2, 1]), ("conv0_b", [3, 3, 3, 1, 1]), ("conv_lom", [1, 1, 1, 1, 1])]
    tensors = []
    for name, w in shapes:
        n = 1
        for d in w:
            n *= d
        tensors.append((name + "/weights", w, [0.01 * i for i in range(n)]))
        tensors.append((name + "/biases", [w[-1]], [0.5] * w[-1]))
    tensors.append(("optimizer/m", [3], [1.0, 2.0, 3.0]))
    crc = 0
    data = b"".join(struct.pack("<%df" % len(v), *v) for _, _, v in tensors)
    meta = {
        "format": "ffn-rs checkpoint",
        "format_version": "1",
        "model": json.dumps({"depth": 1, "features": 1, "fov": [5, 5, 5], "deltas": [1, 1, 1]}),
        "step": "7",
        "rng_state": "[1,2,3,4]",
        "optimizer": '["m"]',
        "training_config": json.dumps({"config": {"volumes": [{"mean": 128.0, "stddev": 33.0}]}}),
        "tensors_crc32c": "%08x" % (crc32c(data) if crc == 0 else crc),
    }
    put("checkpoint", "depth1", safetensors(tensors, meta))
    meta2 = dict(meta, optimizer="[]", training_config="{}")
    del meta2["tensors_crc32c"]
    put("checkpoint", "no_crc", safetensors(tensors[:-1], meta2))


def coords():
    def enc(vols, cs):
        b = b"FFNCRD01" + struct.pack("<I", len(vols))
        for v in vols:
            b += struct.pack("<I", len(v)) + v.encode()
        b += struct.pack("<Q", len(cs))
        for c in cs:
            b += struct.pack("<4I", *c)
        return b
    put("coords", "two_volumes", enc(["a", "vol_b"], [(1, 3, 2, 1), (0, 6, 5, 70000)]))
    put("coords", "empty", enc([], []))


def log_rows():
    put("log_rows", "train_log.csv",
        "step,loss,precision,recall,f1,accuracy,examples,examples_per_s,lr,elapsed_s\n"
        "100,0.52,0.8,0.7,0.75,0.9,800,12.5,0.001,64.2\n200,0.41,0.85,0.72,0.78,0.92,1600,12.9,0.001,128.0\n")
    put("log_rows", "train_log.jsonl",
        '{"step":100,"loss":0.52,"precision":0.8,"recall":0.7,"f1":0.75,"accuracy":0.9,'
        '"examples":800,"examples_per_s":12.5,"lr":0.001,"elapsed_s":64.2}\n')
    put("log_rows", "learning.csv",
        "model,step,examples,cpu_hours,wall_hours,segments,unsegmented,voi_split,voi_merge,"
        "adapted_rand_error,infer_seconds\nckpt-100,100,800,0.1000,0.0500,12,0.5860,1.2000,0.3000,0.7370,4.2\n")


def precomputed():
    info = {"@type": "neuroglancer_multiscale_volume", "type": "segmentation", "data_type": "uint64",
            "num_channels": 1, "scales": [{"key": "8_8_8", "size": [20, 30, 10], "resolution": [8, 8, 8],
                                          "voxel_offset": [0, 0, 0], "chunk_sizes": [[16, 16, 16]],
                                          "encoding": "raw"}]}
    put("precomputed_info", "segmentation", json.dumps(info))
    info.update(type="image", data_type="uint8")
    info["scales"][0].update(key="4_4_40.5", resolution=[4, 4, 40.5])
    put("precomputed_info", "image", json.dumps(info))


def copy(target, name, src):
    with open(os.path.join(ROOT, src), "rb") as f:
        put(target, name, f.read())


def requests():
    copy("request_pbtxt", "fib25_sample2.pbtxt", "data/google-fib25/inference_training_sample2.pbtxt")
    put("request_pbtxt", "options.pbtxt", """# a comment
model_args: '{"depth": 3, "fov_size": [9, 7, 5], "deltas": [4, 3, 2], "batch_size": 2}'
inference_options: {
  move_threshold: 0.8, min_boundary_dist < x: 3 y: 2 z: 1 >; disco_seed_threshold: -1
  min_segment_size: 100 init_activation: 0.95f
}
seed_policy_args: "{\\"step\\": " "16}"
image_mean: inf image_stddev: 1e1
segmentation_output_dir: 'out\\tdir\\101'
masks { channel_mask { } }
""")


def seeds():
    put("seeds", "seeds.txt", "# x,y,z\n10,20,30\n 5 , 6 , 7 \n\n40\n")


def tf_index():
    copy("tf_index", "fib25.index", "data/google-fib25/model.ckpt-27465036.index")


def tile():
    labels = [0, 1, 1, 2, 0, 3]
    raw = struct.pack("<6Q", *labels)
    c = zlib.compressobj(4, zlib.DEFLATED, -15)
    packed = c.compress(raw) + c.flush()
    meta = b'{"segments":3}'
    body = b"FFNTILE1" + struct.pack("<9Q", 3, 0, 8, 16, 1, 2, 3, max(labels), len(meta)) + meta
    body += struct.pack("<Q", len(packed)) + packed
    put("tile", "tile_000003.bin", body + struct.pack("<I", crc32c(body)))


def toml():
    put("toml_config", "labels.toml", 'input = "labels.h5.gz"\noutput = "seg.h5:seg"\n'
        'stack_dataset = "stack"\nno_transforms = true\n')
    put("toml_config", "nested.toml", 'steps = 1000\nlr = 1e-3\nfov = [33, 33, 33]\n\n[labels]\n'
        "output = 'x.h5:y'\n\n[[volumes]]\ninput = \"a.h5\"\n\n[[volumes]]\ntransforms = \"t\"\n"
        "when = 2024-01-01T00:00:00Z\n")


def xyz():
    put("xyz_specs", "specs", "10,20,30\n5,5,5\nraw.h5:/stack/raw\n1.5, 2 ,3e2\n")
    # The first line is --offset, the second --size, of a box in a volume of 7 x 2^64-1 x 100.
    put("xyz_specs", "box_at_the_edge", "1,18446744073709551615,1\n1,1,1\n")


for f in (checkpoints, coords, log_rows, precomputed, requests, seeds, tf_index, tile, toml, xyz):
    f()
