/* torch's float64 uniform draw on a CPU generator, the same bits in one tight loop
   (pytest_cannbench/taskformat/draw_kernel.py loads it; issue 22).

   Input generation replays the official generator: float64 uniform_(0, 1) on a seeded CPU torch.Generator, then
   scaled and cast. torch draws element by element through a serial kernel that calls the generator's random64()
   across a library boundary, about 5.4 ns an element on the 2-core VMs: four fifths of the golden worker's
   input phase. This file runs the same Mersenne Twister (MT19937, as ATen's at::mt19937) on the generator's own
   state, as torch.Generator.get_state() gives it, and writes the same doubles:

     random64 = (first 32-bit output << 32) | second 32-bit output
     value    = (random64 & (2^53 - 1)) * 2^-53          (exact in double)

   then hands the advanced state back for set_state(). The state bytes (CPUGeneratorImplState) hold, at offset 8,
   the engine's "left" (int32), at 16 its "next" (uint64) and from 24 the 624 state words (each a uint64 holding
   a 32-bit value); everything else is left untouched. A process checks this file against torch bit for bit
   before using it (draw_kernel.py), so a torch that lays its state out otherwise only makes it unused. */

#include <stdint.h>
#include <string.h>

#define MT_N 624
#define MT_M 397
#define MATRIX_A 0x9908b0dfu
#define UMASK 0x80000000u
#define LMASK 0x7fffffffu

enum { OFF_LEFT = 8, OFF_NEXT = 16, OFF_STATE = 24, STATE_BYTES = OFF_STATE + 8 * MT_N };

static inline uint32_t twist(uint32_t u, uint32_t v) {
    return (((u & UMASK) | (v & LMASK)) >> 1) ^ ((v & 1u) ? MATRIX_A : 0u);
}

static void next_state(uint32_t *s) {
    int j;
    for (j = 0; j < MT_N - MT_M; j++)
        s[j] = s[j + MT_M] ^ twist(s[j], s[j + 1]);
    for (; j < MT_N - 1; j++)
        s[j] = s[j + MT_M - MT_N] ^ twist(s[j], s[j + 1]);
    s[MT_N - 1] = s[MT_M - 1] ^ twist(s[MT_N - 1], s[0]);
}

static inline uint32_t temper(uint32_t y) {
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

/* ((hi << 32 | lo) & (2^53 - 1)) * 2^-53, as torch computes it, in steps that are all exact (so the same
   double) and that vectorize without a 64-bit integer conversion: the low word through the 2^52 bias
   (2^52 + lo is a double's mantissa), the high 21 bits through a 32-bit one. */
static inline double to_unit(uint32_t hi, uint32_t lo) {
    uint64_t biased = UINT64_C(0x4330000000000000) | lo;
    double low;
    memcpy(&low, &biased, 8);
    low -= 0x1p52;
    return ((double)(int32_t)(hi & 0x1fffffu) * 0x1p32 + low) * 0x1p-53;
}

/* The size of the state this file reads and writes: the caller checks it against get_state()'s. */
int64_t cb_state_bytes(void) { return STATE_BYTES; }

/* Fill out[0..n) as uniform_(0, 1) would, advancing the state in `bytes`; 0, or -1 for a state this file does not
   understand (then nothing was written). */
int cb_uniform64(unsigned char *bytes, double *out, int64_t n) {
    uint32_t s[MT_N];
    uint64_t words[MT_N];
    int32_t left;
    uint64_t next64;
    memcpy(&left, bytes + OFF_LEFT, 4);
    memcpy(&next64, bytes + OFF_NEXT, 8);
    memcpy(words, bytes + OFF_STATE, sizeof words);
    if (left < 1 || left > MT_N || next64 > MT_N || (left > 1 && next64 + (uint64_t)left - 1 != MT_N))
        return -1; /* "left - 1" words remain before the next twist, and they end the block */
    for (int i = 0; i < MT_N; i++) {
        if (words[i] >> 32)
            return -1;
        s[i] = (uint32_t)words[i];
    }
    uint32_t next = (uint32_t)next64;
    int64_t k = 0;
    while (k < n) {
        /* whole pairs left in this block: straight from the state words (the loop vectorizes) */
        int64_t pairs = (left - 1) / 2;
        if (pairs > n - k)
            pairs = n - k;
        const uint32_t *w = s + next;
        double *o = out + k;
        for (int64_t i = 0; i < pairs; i++)
            o[i] = to_unit(temper(w[2 * i]), temper(w[2 * i + 1]));
        k += pairs;
        next += (uint32_t)(2 * pairs);
        left -= (int32_t)(2 * pairs);
        if (k == n)
            break;
        /* a pair that crosses the twist, or none left: one output at a time, as the engine does */
        uint32_t pair[2];
        for (int h = 0; h < 2; h++) {
            if (--left == 0) {
                next_state(s);
                left = MT_N;
                next = 0;
            }
            pair[h] = temper(s[next++]);
        }
        out[k++] = to_unit(pair[0], pair[1]);
    }
    for (int i = 0; i < MT_N; i++)
        words[i] = s[i];
    next64 = next;
    memcpy(bytes + OFF_LEFT, &left, 4);
    memcpy(bytes + OFF_NEXT, &next64, 8);
    memcpy(bytes + OFF_STATE, words, sizeof words);
    return 0;
}
