"""Writes Neuroglancer precomputed volumes with tensorstore for the cseg tests.

Usage: python make_fixtures.py [OUT_DIR]   (default: the folder of this script)

Each fixture is an unsharded, uncompressed `neuroglancer_precomputed` volume with
`"encoding": "compressed_segmentation"`, so every chunk file under the scale's key
folder is the raw compressed_segmentation encoding of that chunk. The labels follow
`label()` below; the Rust tests compute the same formula.
"""

import json
import os
import shutil
import sys

import numpy as np
import tensorstore as ts

SIZE = [37, 29, 21]  # x, y, z
CHUNK = [16, 16, 8]

# name, data type, block size [x, y, z]
FIXTURES = [
    ("u64_b888", "uint64", [8, 8, 8]),
    ("u32_b888", "uint32", [8, 8, 8]),
    ("u64_b444", "uint64", [4, 4, 4]),
    ("u32_b423", "uint32", [4, 2, 3]),
]


def label(x, y, z, wide):
    """The label at voxel (x, y, z); `wide` adds ids above 2**40 (uint64 only)."""
    if x >= 24 and y >= 16 and z >= 16:
        # A corner with (almost) one distinct label per voxel: wide encodings.
        value = 1000 + x + 37 * (y + 29 * z)
    else:
        value = (x // 5) + 7 * (y // 6) + 50 * (z // 4)
    if wide and (3 * x + 5 * y + 7 * z) % 23 == 0:
        value = (1 << 40) + (value << 3) + (x % 5)
    return value


def label_array(dtype):
    wide = dtype == "uint64"
    out = np.zeros(SIZE, dtype=dtype)  # indexed [x, y, z]
    for x in range(SIZE[0]):
        for y in range(SIZE[1]):
            for z in range(SIZE[2]):
                out[x, y, z] = label(x, y, z, wide)
    return out


def write_fixture(root, name, dtype, block):
    path = os.path.join(root, name)
    shutil.rmtree(path, ignore_errors=True)
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": path},
        "multiscale_metadata": {
            "type": "segmentation",
            "data_type": dtype,
            "num_channels": 1,
        },
        "scale_metadata": {
            "size": SIZE,
            "resolution": [1, 1, 1],
            "chunk_size": CHUNK,
            "encoding": "compressed_segmentation",
            "compressed_segmentation_block_size": block,
        },
        "create": True,
        "delete_existing": True,
    }
    store = ts.open(spec).result()
    # Domain is [x, y, z, channel].
    store[..., 0] = label_array(dtype)
    # Read back through tensorstore as a sanity check of the fixture itself.
    assert np.array_equal(store[..., 0].read().result(), label_array(dtype))
    with open(os.path.join(path, "info")) as f:
        info = json.load(f)
    scale = info["scales"][0]
    assert "sharding" not in scale, "fixture must be unsharded"
    print(name, json.dumps(scale))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    print("tensorstore", ts.__version__ if hasattr(ts, "__version__") else "(see pip)")
    for name, dtype, block in FIXTURES:
        write_fixture(root, name, dtype, block)


if __name__ == "__main__":
    main()
