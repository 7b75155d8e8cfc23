/* Philox4x32-10 (Salmon et al., SC'11) and the draws built on it. */
#include <math.h>

#include "core/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void cl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                      uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void cl_rng_init(cl_rng *r, uint64_t seed, uint64_t stream)
{
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32);
    r->ctr[0] = 0;
    r->ctr[1] = 0;
    r->ctr[2] = (uint32_t)stream;
    r->ctr[3] = (uint32_t)(stream >> 32);
    r->used = 4;
}

/* splitmix64's finaliser: a cheap bijective mixer. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t cl_rng_stream_id(uint64_t a, uint64_t b, uint64_t c)
{
    return mix64(mix64(mix64(a) ^ b) ^ c);
}

/* Purpose tag of the node streams, beside the loader's purposes. */
#define NODE_STREAM_TAG 0x6e6f6465u /* "node" */

void cl_rng_init_node(cl_rng *r, uint64_t seed, uint64_t step, uint64_t node)
{
    cl_rng_init(r, seed, cl_rng_stream_id(NODE_STREAM_TAG, step, node));
}

void cl_rng_seek(cl_rng *r, uint64_t word)
{
    const uint64_t block = word / 4;
    r->ctr[0] = (uint32_t)block;
    r->ctr[1] = (uint32_t)(block >> 32);
    r->used = 4;
    if (word % 4) {
        /* Make the block holding the word and skip to it. */
        (void)cl_rng_u32(r);
        r->used = (int)(word % 4);
    }
}

uint32_t cl_rng_u32(cl_rng *r)
{
    if (r->used == 4) {
        cl_philox4x32_10(r->ctr, r->key, r->block);
        if (++r->ctr[0] == 0)
            ++r->ctr[1];
        r->used = 0;
    }
    return r->block[r->used++];
}

uint64_t cl_rng_u64(cl_rng *r)
{
    uint64_t hi = cl_rng_u32(r);
    return (hi << 32) | cl_rng_u32(r);
}

float cl_rng_uniform(cl_rng *r)
{
    return (float)(cl_rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

double cl_rng_uniform_f64(cl_rng *r)
{
    return (double)(cl_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

uint32_t cl_rng_below(cl_rng *r, uint32_t n)
{
    /* Lemire's multiply-and-reject. */
    uint64_t m = (uint64_t)cl_rng_u32(r) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t t = (uint32_t)(-n) % n;
        while (low < t) {
            m = (uint64_t)cl_rng_u32(r) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

double cl_rng_normal(cl_rng *r)
{
    double u1 = cl_rng_uniform_f64(r);
    double u2 = cl_rng_uniform_f64(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
