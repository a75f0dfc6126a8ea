"""specllama: lossless speculative decoding for local GGUF models.

A draft model proposes tokens, the target model verifies them in one batched pass, and a
rejection-sampling rule keeps the output distribution exactly the target's. The loop is native
(specllama._core, over llama.cpp); this package orchestrates it.
"""

from ._libllama import preload as _preload

_preload()

from ._core import Context, Model, accept_trials, log_set_level, quantize, quantize_types  # noqa: E402
from ._core import sampling_distribution, supports_gpu_offload, vocab_check_compatible  # noqa: E402
from .decoder import Completion, DSIStats, Stats, StepChunk, SpeculativeDecoder  # noqa: E402

__version__ = "0.1.0"

# SPECLLAMA_LOG=debug|info|warn|error shows llama.cpp's own messages on stderr
_LEVELS = {"none": 0, "debug": 1, "info": 2, "warn": 3, "error": 4}
log_set_level(_LEVELS.get(__import__("os").environ.get("SPECLLAMA_LOG", "none").lower(), 0))

__all__ = [
    "Completion",
    "Context",
    "DSIStats",
    "Model",
    "SpeculativeDecoder",
    "Stats",
    "StepChunk",
    "accept_trials",
    "log_set_level",
    "quantize",
    "quantize_types",
    "sampling_distribution",
    "supports_gpu_offload",
    "vocab_check_compatible",
]
