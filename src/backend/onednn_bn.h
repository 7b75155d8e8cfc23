/* Batch norm on oneDNN's nChw16c activation layout, forward (training and
 * inference, optionally with the ReLU fused) and backward, as plain C loops
 * with one OpenMP loop over channel blocks per pass.
 *
 * Why not oneDNN's: its BN splits a call over threads with spinning
 * barriers between passes, and on a machine shared with other work a
 * descheduled thread stalls every barrier for a whole time slice (ResNet-50
 * BN backward ran 75x slower under load than alone).  Here each thread owns
 * whole channel blocks, so a call has no barrier but the loop's end. */
#ifndef CL_BACKEND_ONEDNN_BN_H
#define CL_BACKEND_ONEDNN_BN_H

#include <stdint.h>

/* x, y: (N, C/16, HW, 16), C a multiple of 16.  mean, var: (C) batch mean
 * and biased variance (out).  relu != 0 writes max(y, 0). */
void cl_dnnl_bn_forward_train(float *y, float *mean, float *var, const float *x,
                              const float *gamma, const float *beta, int N,
                              int C, int64_t HW, float eps, int relu);
/* Normalises with the given statistics (running ones for inference). */
void cl_dnnl_bn_forward_infer(float *y, const float *x, const float *gamma,
                              const float *beta, const float *mean,
                              const float *var, int N, int C, int64_t HW,
                              float eps, int relu);
/* Backward of the training forward; with relu, dy is the gradient of the
 * ReLU output and the mask is recomputed from x.  dx may not alias dy. */
void cl_dnnl_bn_backward(float *dx, float *dgamma, float *dbeta,
                         const float *dy, const float *x, const float *mean,
                         const float *var, const float *gamma,
                         const float *beta, int N, int C, int64_t HW, float eps,
                         int relu);

#endif
