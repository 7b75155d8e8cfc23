#!/usr/bin/env python3
"""Step time and scaling efficiency of data-parallel training, from the
measurements of bench/dist_scaling.sh (docs/distributed.md, "Scaling model").

Per optimizer step on N nodes (one rank each), with the gradient in buckets
of at most B bytes (bucket_mb) allreduced by a ring:

    t_ar(S)  = 2 (N - 1) alpha + 2 (N - 1) / N * S / beta
    t_comm   = sum of t_ar over the buckets
    overlap  : every bucket but the last is sent while backward goes on, so
               t_step = t_fwd + max(t_bwd, t_comm - t_ar(last)) + t_ar(last)
    blocking : t_step = t_compute + t_comm
    efficiency = t_compute / t_step

alpha is the per-message latency, beta the link's bandwidth in bytes/s.

    dist_model.py --compute 0.43 --bwd-share 0.67 --grad-mb 97.5 \
        --alpha-us 25 [--check-nodes 2 --check-gbit 1 --check-ms 2977]
"""
import argparse


def t_allreduce(n, size, alpha, beta):
    if n == 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / beta


def step(n, args, gbit, overlap=True):
    beta = gbit * 1e9 / 8
    grad = args.grad_mb * 2**20
    bucket = args.bucket_mb * 2**20
    sizes = []
    left = grad
    while left > 0:
        sizes.append(min(bucket, left))
        left -= bucket
    alpha = args.alpha_us * 1e-6
    ts = [t_allreduce(n, s, alpha, beta) for s in sizes]
    tc = args.compute
    tb = tc * args.bwd_share
    if not overlap:
        return tc + sum(ts)
    return (tc - tb) + max(tb, sum(ts) - ts[-1]) + ts[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--compute", type=float, required=True,
                   help="seconds of forward + backward + update per step")
    p.add_argument("--bwd-share", type=float, default=2 / 3,
                   help="share of the compute that is backward")
    p.add_argument("--grad-mb", type=float, required=True,
                   help="gradient MiB per step (f32 parameters)")
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--alpha-us", type=float, default=25)
    p.add_argument("--nodes", default="8,64,256")
    p.add_argument("--gbit", default="10,100")
    p.add_argument("--check-nodes", type=int)
    p.add_argument("--check-gbit", type=float)
    p.add_argument("--check-ms", type=float,
                   help="measured ms/step to hold the prediction against")
    a = p.parse_args()
    print("| nodes | link | step s (overlap) | efficiency | "
          "step s (blocking) | efficiency |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for g in [float(x) for x in a.gbit.split(",")]:
        for n in [int(x) for x in a.nodes.split(",")]:
            so, sb = step(n, a, g), step(n, a, g, overlap=False)
            print("| %d | %g Gbit/s | %.3f | %.0f%% | %.3f | %.0f%% |" %
                  (n, g, so, 100 * a.compute / so, sb, 100 * a.compute / sb))
    if a.check_nodes:
        pred = step(a.check_nodes, a, a.check_gbit)
        print("check: %d nodes at %g Gbit/s: predicted %.0f ms/step, "
              "measured %.0f (%+.0f%%)" %
              (a.check_nodes, a.check_gbit, 1e3 * pred, a.check_ms,
               100 * (a.check_ms / (1e3 * pred) - 1)))


if __name__ == "__main__":
    main()
