/* Counter-based random streams (Philox4x32-10), keyed by (seed, stream).
 *
 * A stream's numbers depend only on its seed, its stream id and how many
 * numbers were drawn from it, never on which thread draws them: the loader
 * gives every (epoch, sample) its own stream, so augmentation is identical
 * for any number of workers, and a backend gives every (step, node) its
 * own (cl_rng_init_node), which a kernel's threads share by seeking to
 * the numbers of their part of the work (cl_rng_seek). */
#ifndef CL_CORE_RNG_H
#define CL_CORE_RNG_H

#include <stdint.h>

typedef struct cl_rng {
    uint32_t key[2]; /* from the seed */
    uint32_t ctr[4]; /* ctr[2..3]: stream id; ctr[0..1]: block counter */
    uint32_t block[4];
    int used; /* words of block already handed out (4 = empty) */
} cl_rng;

void cl_rng_init(cl_rng *r, uint64_t seed, uint64_t stream);

/* Mixes several integers (e.g. epoch, sample index, purpose) into one
 * stream id; distinct inputs give distinct ids with overwhelming odds. */
uint64_t cl_rng_stream_id(uint64_t a, uint64_t b, uint64_t c);

/* The stream of node `node` of a graph at training step `step`: what an
 * op that draws (dropout, DropPath) uses, so that its numbers depend on
 * (seed, step, node) alone. */
void cl_rng_init_node(cl_rng *r, uint64_t seed, uint64_t step, uint64_t node);

/* Positions r at the word-th 32-bit number of its stream (0: the first),
 * as if that many had been drawn: each thread of a parallel loop seeks to
 * its first element's numbers and the result is the same on any thread
 * count. */
void cl_rng_seek(cl_rng *r, uint64_t word);

uint32_t cl_rng_u32(cl_rng *r);
uint64_t cl_rng_u64(cl_rng *r);
/* Uniform in [0, 1) with 24 random bits. */
float cl_rng_uniform(cl_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double cl_rng_uniform_f64(cl_rng *r);
/* Uniform integer in [0, n) without modulo bias; n > 0. */
uint32_t cl_rng_below(cl_rng *r, uint32_t n);
/* Standard normal (Box-Muller). */
double cl_rng_normal(cl_rng *r);

/* The raw Philox4x32-10 bijection, exposed for known-answer tests. */
void cl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                      uint32_t out[4]);

#endif
