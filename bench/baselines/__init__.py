"""The baselines the benchmarks compare the service's methods against; none of them is a service method.

- :mod:`bench.baselines.newton_jackknife`: Newton step (NS) and infinitesimal jackknife (IJ), the
  Hessian-free paper's baselines (explicit d x d Hessians), for ``bench.hessian_free``;
- :mod:`bench.baselines.descent_to_delete`: Descent-to-Delete, the Langevin paper's baseline, for
  ``bench.langevin``;
- :mod:`bench.baselines.gin`: a graph isomorphism network trained from scratch, for
  ``bench.graph_unlearning``.
"""
