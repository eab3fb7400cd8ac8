"""kiln's noise generator, reimplemented in numpy (src/core/rng.h is the
C++ one; both must give the same numbers).

Counter-based, so any stretch of the stream can be drawn on its own: the
k-th 64-bit word of the stream for `seed` is splitmix64's output for state
seed + (k + 1) * 0x9E3779B97F4A7C15. Standard normals come in pairs from two
words (Box-Muller in float64): u1, u2 = (word >> 11) * 2**-53, then
r = sqrt(-2 log(1 - u1)), z0 = r cos(2 pi u2), z1 = r sin(2 pi u2), rounded
to float32. An odd count drops the last sine.

    normals(seed, first_pair, count) -> float32 array of `count` normals
"""
import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def words(seed, first, count):
    k = np.arange(first, first + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (k + np.uint64(1)) * GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def normals(seed, first_pair, count):
    pairs = (count + 1) // 2
    w = words(seed, 2 * first_pair, 2 * pairs)
    u = (w >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    u1, u2 = u[0::2], u[1::2]
    r = np.sqrt(-2.0 * np.log1p(-u1))
    z = np.empty(2 * pairs, dtype=np.float64)
    z[0::2] = r * np.cos(2.0 * np.pi * u2)
    z[1::2] = r * np.sin(2.0 * np.pi * u2)
    return z[:count].astype(np.float32)
