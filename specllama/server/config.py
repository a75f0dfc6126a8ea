"""ServerConfig: what `specllama serve` is started with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence

from .. import reasoning
from ..options import GenerateOptions


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    parallel: int = 1
    queue_size: int = 16  # requests waiting for a slot beyond the busy ones
    api_key: Optional[str] = None
    chat_template: Optional[str] = None
    cors_origins: Sequence[str] = ()
    max_body_bytes: int = 8 * 1024 * 1024
    model_name: str = "model"
    n_batch: int = 2048  # llama-server's -b: /infill keeps 3/4 of it for the prefix, 1/4 for the suffix
    defaults: GenerateOptions = field(default_factory=GenerateOptions)
    reasoning_format: str = "auto"  # a chat reply's thinking: reasoning_content, or "none": left in the content
    template_kwargs: Dict[str, Any] = field(default_factory=dict)  # chat template variables a request's override
    reasoning_budget: int = -1  # a chat reply's thinking budget in tokens (-1: none), a request's overrides
    reasoning_budget_message: str = ""  # forced before the closing tag when the budget is spent

    def __post_init__(self) -> None:
        reasoning.check_format(self.reasoning_format)
