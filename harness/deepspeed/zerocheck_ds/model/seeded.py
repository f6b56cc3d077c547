"""Seeded values: the numbers a scenario means, from counters, the same bits as the C++ side.

The rule (harness/SCENARIO_FORMAT.md, "Numbers"; engine/seeded_values.h is its C++ twin): a
stream is picked by (seed, tag, key) and starts at
    base = splitmix64(splitmix64(splitmix64(seed) ^ tag) ^ key);
its element i is k = splitmix64(base + i * 0x9E3779B97F4A7C15) >> 40 (24 bits), mapped to
u = (k - 2^23) / 2^23 in [-1, 1), and the value is float32(u * bound): one rounding of a
product exact in double. Parameters: tag 1, key FNV-1a 64 of the path ("0.linear.weight", a
shared module's at its first place in pre-order), bound float32(1 / sqrt(fan_in)) with fan_in
size(1) for 2+ dimensions, size(0) for one, else 1. Data: tag 2 (input), 3 (target), 4 (the
replay's probe input), key op_index * 256 + rank, bound 1.

The integer functions need only the standard library (the golden-value tests use them); the
tensor functions need torch and nothing from this package, so twin code can copy this module.
"""

import math
import struct

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
HALF_RANGE = 1 << 23

# The streams, by name: (tag, what the key is). One table, engine/seeded_values.h's
# ZERO3_VALUE_STREAMS; tests/test_seeded.py holds the two to the shared fixture.
STREAMS = {
    "parameter": (1, "FNV-1a 64 of the parameter's path"),
    "input": (2, "op_index * 256 + rank"),
    "target": (3, "op_index * 256 + rank"),
    "probe_input": (4, "op_index * 256 + rank"),
}


def splitmix64(state):
    """The next output of a splitmix64 generator in `state`: splitmix64(0) == 0xE220A8397B1DCDAF."""
    z = (state + GOLDEN) & MASK64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & MASK64
    return z ^ (z >> 31)


def fnv1a64(text):
    """FNV-1a 64 of the UTF-8 bytes of `text`."""
    value = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        value = ((value ^ byte) * 0x100000001B3) & MASK64
    return value


def stream_base(seed, stream, key):
    """Where the stream `stream` ("parameter", "input", ...) of `seed` with `key` starts."""
    tag = STREAMS[stream][0]
    return splitmix64(splitmix64(splitmix64(seed & MASK64) ^ tag) ^ (key & MASK64))


def data_key(op_index, rank):
    return op_index * 256 + rank


def parameter_key(path):
    return fnv1a64(path)


def fan_in(shape):
    return shape[1] if len(shape) >= 2 else shape[0] if len(shape) == 1 else 1


def parameter_bound(fan):
    """float32(1 / sqrt(fan_in)), rounded once from double."""
    return to_float32(1.0 / math.sqrt(max(fan, 1)))


def to_float32(x):
    """Rounds a Python float (double) to the nearest float32, as C's (float) cast does."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def float32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def unit_value(base, index):
    """Element `index` of the stream at `base` before scaling, exact: (k - 2^23) / 2^23."""
    k = splitmix64((base + index * GOLDEN) & MASK64) >> 40
    return (k - HALF_RANGE) / HALF_RANGE


def value(base, index, bound):
    """float32(unit_value * bound) as a Python float (the float32's exact value)."""
    return to_float32(unit_value(base, index) * bound)


# ---- tensors (torch) ------------------------------------------------------------------------

def _signed(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def _logical_shift(z, bits):
    # torch's >> on int64 keeps the sign; the rule shifts unsigned.
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def seeded_tensor(shape, base, bound):
    """A float32 tensor of `shape` holding the stream at `base` scaled by `bound`, row-major.

    Vectorised over int64 (wrapping multiplication, shifts masked to be unsigned); the tests
    compare it with value() element by element.
    """
    import torch

    n = math.prod(shape)
    index = torch.arange(n, dtype=torch.int64)
    z = _signed(base) + (index + 1) * _signed(GOLDEN)  # splitmix64's state after i + 1 steps
    z = (z ^ _logical_shift(z, 30)) * _signed(0xBF58476D1CE4E5B9)
    z = (z ^ _logical_shift(z, 27)) * _signed(0x94D049BB133111EB)
    z = z ^ _logical_shift(z, 31)
    k = _logical_shift(z, 40)
    unit = (k.to(torch.float64) - HALF_RANGE) / HALF_RANGE
    return (unit * float(bound)).to(torch.float32).reshape(tuple(shape))


def fill_parameters(module, seed):
    """Fills every parameter of `module` from its path's stream (shared ones at their first path)."""
    import torch

    with torch.no_grad():
        for path, param in module.named_parameters():
            if param.numel() == 0:
                continue
            base = stream_base(seed, "parameter", parameter_key(path))
            param.copy_(seeded_tensor(tuple(param.shape), base,
                                      parameter_bound(fan_in(tuple(param.shape)))))


def data(seed, stream, op_index, rank, batch, features):
    """The (batch, features) tensor of a data stream for operation `op_index` on `rank`."""
    base = stream_base(seed, stream, data_key(op_index, rank))
    return seeded_tensor((batch, features), base, 1.0)


def micro_batch(seed, op_index, rank, batch, features):
    """(input, target) of `rank`'s micro-batch for operation `op_index`."""
    return (data(seed, "input", op_index, rank, batch, features),
            data(seed, "target", op_index, rank, batch, features))
