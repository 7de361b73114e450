"""tsmix.engine: the one training loop of tsmix (forecasting, tuning trials, LM, synthetic tasks).

``fit(Task(model, optimizer, data, loss, validate, schedule, fingerprint), EngineConfig(...))``
trains in place with epoch or step data, torch lr schedulers, early stopping with best-weight
restore, gradient clipping and accumulation, bf16 autocast, torch.compile, epoch-end callbacks,
atomic checkpoints that resume bit-exactly after a kill, and DDP under torchrun.
"""

from tsmix.engine.callbacks import Callback
from tsmix.engine.checkpoint import CheckpointMismatch
from tsmix.engine.config import EngineConfig, FitResult, Task
from tsmix.engine.data import SampledBatches, WindowBatches
from tsmix.engine.distributed import Dist, from_env, rank_device
from tsmix.engine.loop import fit
from tsmix.engine.memory import retain_freed_memory
from tsmix.engine.schedules import Schedule, epoch_rule, epoch_rule_factor, one_cycle

__all__ = [
    "Callback", "CheckpointMismatch", "Dist", "EngineConfig", "FitResult", "SampledBatches", "Schedule",
    "Task", "WindowBatches", "epoch_rule", "epoch_rule_factor", "fit", "from_env", "one_cycle", "rank_device",
    "retain_freed_memory",
]
