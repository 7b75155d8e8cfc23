/* Batch norm on oneDNN's activation layouts (nChw16c, nChw8c, nhwc, nchw,
 * whichever the ISA gives), forward (training and inference, optionally
 * with the ReLU fused) and backward, as plain C loops with one OpenMP loop
 * over channel groups per pass.
 *
 * Why not oneDNN's: its BN splits a call over threads with spinning
 * barriers between passes, and on a machine shared with other work a
 * descheduled thread stalls every barrier for a whole time slice (ResNet-50
 * BN backward ran 75x slower under load than alone).  Here each thread owns
 * whole channel groups, so a call has no barrier but the loop's end.
 * SyncBatchNorm splits forward and backward at their per-channel sums
 * (which the caller adds up over ranks); one process calls the fused
 * kernels and makes no extra pass. */
#ifndef CL_BACKEND_ONEDNN_BN_LOOPS_H
#define CL_BACKEND_ONEDNN_BN_LOOPS_H

#include <stdint.h>

#include "backend/onednn/layout.h"

/* x, y: activations in layout l, f32 or (bf16 != 0) bf16 as uint16_t; dx,
 * dy likewise.  Every output activation gets zeros in its padded channels.
 * mean, var: (C) batch mean and biased variance (out); gamma, beta and their
 * gradients: (C) f32.  relu != 0 writes max(y, 0). */
void cl_dnnl_bn_forward_train(void *y, float *mean, float *var, const void *x,
                              const float *gamma, const float *beta,
                              const cl_bn_layout *l, float eps, int relu,
                              int bf16);
/* SyncBatchNorm forward, first part: this process's per-channel sum x and
 * sum x^2 (C each), to be summed over all ranks; the sum of squares is
 * accumulated around the local mean, so the cancellation of
 * E[x^2] - mean^2 happens only once, in double, on the global sums. */
void cl_dnnl_bn_sums(double *sum, double *sumsq, const void *x,
                     const cl_bn_layout *l, int bf16);
/* Normalises with the given statistics (running ones for inference, the
 * global batch ones for SyncBatchNorm). */
void cl_dnnl_bn_forward_infer(void *y, const void *x, const float *gamma,
                              const float *beta, const float *mean,
                              const float *var, const cl_bn_layout *l,
                              float eps, int relu, int bf16);
/* Backward of the training forward; with relu, dy is the gradient of the
 * ReLU output and the mask is recomputed from x.  dx may not alias dy. */
void cl_dnnl_bn_backward(void *dx, float *dgamma, float *dbeta, const void *dy,
                         const void *x, const float *mean, const float *var,
                         const float *gamma, const float *beta,
                         const cl_bn_layout *l, float eps, int relu, int bf16);
/* SyncBatchNorm backward, first part: this process's per-channel sums of
 * dy and of dy * xhat (dy masked by the fused ReLU), to be summed over all
 * ranks; they are also this process's dbeta and dgamma. */
void cl_dnnl_bn_backward_sums(double *sum_dy, double *sum_dy_xhat,
                              const void *dy, const void *x, const float *mean,
                              const float *var, const float *gamma,
                              const float *beta, const cl_bn_layout *l,
                              float eps, int relu, int bf16);
/* Second part: dx from the global sums and the global sample count. */
void cl_dnnl_bn_backward_dx(void *dx, const void *dy, const void *x,
                            const float *mean, const float *var,
                            const float *gamma, const float *beta,
                            const double *sum_dy, const double *sum_dy_xhat,
                            double count, const cl_bn_layout *l, float eps,
                            int relu, int bf16);

#endif
