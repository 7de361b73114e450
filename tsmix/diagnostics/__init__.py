"""Diagnostics that work on any module: curvature, energy traces, orthogonality checks.

Export list, one block per diagnostics module (each owner keeps its own block):
- curvature (tsmix.diagnostics.curvature): finite-difference curvature kappa of any map,
  its eps sweep with plateau detection, isotropic and anisotropic output metrics.
- yang_baxter (tsmix.diagnostics.yang_baxter): Ising-algebra generators, Baxterized R,
  generalized Yang-Baxter residual, commuting transfer matrices, orthogonality and
  Jacobian-condition checks (generic helpers such as ``comm`` stay in the module).
"""

from tsmix.diagnostics.curvature import (
    CONDS,
    EPS_GRID,
    anisotropic_precision,
    curvature,
    curvature_metrics,
    curvature_sweep,
    find_plateau,
    unit_directions,
)
from tsmix.diagnostics.yang_baxter import (
    baxterized_r,
    condition_number,
    ising_generators,
    jacobian_condition,
    orthogonality_defect,
    transfer_commutator,
    transfer_matrix,
    ybe_residual,
)

__all__ = [
    # curvature
    "CONDS",
    "EPS_GRID",
    "anisotropic_precision",
    "curvature",
    "curvature_metrics",
    "curvature_sweep",
    "find_plateau",
    "unit_directions",
    # yang_baxter
    "baxterized_r",
    "condition_number",
    "ising_generators",
    "jacobian_condition",
    "orthogonality_defect",
    "transfer_commutator",
    "transfer_matrix",
    "ybe_residual",
]
