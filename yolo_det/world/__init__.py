"""World-size invariance: a run with virtual world size V is the run V GPUs would make, on any N | V processes.

``plan`` says which virtual ranks a process runs and validates V, the batch and N; ``sampler`` gives each
virtual rank its data from (seed, epoch, v); ``batchnorm`` keeps one rule for the running statistics;
``reduce`` sums the V micro-batch gradients in one fixed binary tree (in the rank, then across ranks
through a DDP communication hook); ``engine`` runs a batch as its V/N micro-batches; ``compat`` refuses
what V cannot make invariant (``--sync-bn``, multi-scale, ...). Imports only ``core``.
"""

from .batchnorm import RunningStatsRule
from .engine import WorldEngine
from .compat import REASONS, check
from .plan import WorldPlan, plan_from_env, split_targets
from .reduce import PartialStack, TreeHookState, fixed_tree_hook, tree_sum
from .sampler import VirtualSampler

__all__ = ["REASONS", "PartialStack", "RunningStatsRule", "TreeHookState", "VirtualSampler", "WorldEngine", "WorldPlan",
           "check", "fixed_tree_hook", "plan_from_env", "split_targets", "tree_sum"]
