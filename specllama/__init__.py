"""specllama: lossless speculative decoding for local GGUF models.

A draft model proposes tokens, the target model verifies them in one batched pass, and a
rejection-sampling rule keeps the output distribution exactly the target's. The loop is native
(specllama._core, over llama.cpp); this package orchestrates it.
"""

import os as _os

from ._libllama import preload as _preload
from ._version import __version__  # noqa: F401

_preload()

try:
    from . import _core  # noqa: E402
except ImportError as _exc:  # a source tree without the built extension, most often
    _here = _os.path.dirname(_os.path.abspath(__file__))
    raise ImportError(
        f"specllama's native extension (specllama._core) is not in {_here}. This is the source tree, "
        "which Python imports before the installed package when run from the repository's root. "
        "Run from another directory, or install for development with "
        "'pip install --no-build-isolation -e .' (docs/testing.md)."
    ) from _exc

from ._core import Context, Model, accept_trials, log_reclaim, log_set_level, quantize, quantize_types  # noqa: E402
from ._core import sampling_distribution, supports_gpu_offload, vocab_difference  # noqa: E402
from ._core import list_devices, rpc_add_servers, rpc_serve, supports_rpc  # noqa: E402
from .decoder import SpeculativeDecoder  # noqa: E402
from .local_drafts import DraftCandidate, find_drafts  # noqa: E402
from .local_models import LocalModel, list_local_models, resolve_model  # noqa: E402
from .options import Completion, DSIStats, GenerateOptions, PromptTooLong, Stats, StepChunk, StepPrices  # noqa: E402
from .options import as_dict  # noqa: E402
from .rpc_guard import RPCConnectionLost  # noqa: E402
from .templates import ChatTemplateError  # noqa: E402
from .completions import RequestError  # noqa: E402
from .templates import builtin_names as chat_templates  # noqa: E402


# SPECLLAMA_LOG=debug|info|warn|error shows llama.cpp's own messages on stderr
_LEVELS = {"none": 0, "debug": 1, "info": 2, "warn": 3, "error": 4}
log_set_level(_LEVELS.get(_os.environ.get("SPECLLAMA_LOG", "none").lower(), 0))

__all__ = [
    "ChatTemplateError",
    "Completion",
    "Context",
    "DSIStats",
    "DraftCandidate",
    "GenerateOptions",
    "LocalModel",
    "Model",
    "PromptTooLong",
    "RPCConnectionLost",
    "RequestError",
    "SpeculativeDecoder",
    "Stats",
    "StepChunk",
    "StepPrices",
    "accept_trials",
    "as_dict",
    "chat_templates",
    "find_drafts",
    "list_devices",
    "list_local_models",
    "log_reclaim",
    "log_set_level",
    "quantize",
    "quantize_types",
    "resolve_model",
    "rpc_add_servers",
    "rpc_serve",
    "sampling_distribution",
    "supports_gpu_offload",
    "supports_rpc",
    "vocab_difference",
]
