"""The prompt stage: fit retrieved chunks to a token budget (lowest scores dropped first)
and render the Jinja2 template, counting tokens with the served model's tokenizer."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from opentelemetry.trace import TracerProvider
from spanbudget.common import semconv

from . import attributes as names
from .faults import NO_FAULTS, FaultPlan
from .tokens import TokenCounter
from .vectorstore import Hit

__all__ = ["DEFAULT_TEMPLATES", "PromptBuilder", "RenderedPrompt"]

DEFAULT_TEMPLATES = Path(__file__).parent / "templates"
# Chat templates wrap every message in a few special tokens (role markers, separators).
_TOKENS_PER_MESSAGE = 4


@dataclass(frozen=True)
class RenderedPrompt:
    messages: list[dict[str, str]]
    input_tokens: int
    kept: int
    dropped: int


class PromptBuilder:
    """Renders `template` (from `templates_dir`, falling back to the shipped defaults)."""

    def __init__(
        self,
        counter: TokenCounter,
        tracer_provider: TracerProvider,
        *,
        template: str = "rag.j2",
        templates_dir: Path | None = None,
        context_token_budget: int = 1500,
        chunk_counts_kept: int = 4096,
    ) -> None:
        search_path = [str(templates_dir)] if templates_dir else []
        search_path.append(str(DEFAULT_TEMPLATES))
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(search_path),
            autoescape=False,  # plain text for a model, not HTML
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
        )
        # Fail at start-up, not on the first request, when the template is missing or broken.
        self._template = env.get_template(template)
        self._template_id = template
        self._counter = counter
        # Retrieved chunks recur (a corpus holds a bounded set, and popular ones come back
        # request after request): each is tokenised once while it is among the
        # `chunk_counts_kept` used most recently (0: none), not a few tenths of a
        # millisecond of the event loop on every request.
        self._chunk_tokens = functools.lru_cache(maxsize=chunk_counts_kept)(counter.count)
        self._budget = context_token_budget
        self._tracer = tracer_provider.get_tracer(__name__)

    def fit(self, hits: Sequence[Hit]) -> tuple[list[Hit], int]:
        """Drop the lowest-scoring hits until the rest fit the budget; keep score order."""
        ranked = sorted(hits, key=lambda h: h.score, reverse=True)
        sizes = [self._chunk_tokens(h.text) for h in ranked]
        total = sum(sizes)
        while ranked and total > self._budget:
            ranked.pop()
            total -= sizes.pop()
        return ranked, total

    def count_messages(self, messages: Sequence[dict[str, str]]) -> int:
        return sum(self._counter.count(m["content"]) + _TOKENS_PER_MESSAGE for m in messages)

    async def render(
        self,
        conversation: Sequence[dict[str, str]],
        hits: Sequence[Hit],
        faults: FaultPlan = NO_FAULTS,
    ) -> RenderedPrompt:
        with self._tracer.start_as_current_span(
            names.SPAN_PROMPT, attributes={names.PROMPT_TEMPLATE_ID: self._template_id}
        ) as span:
            await faults.inject("prompt", span)
            kept, context_tokens = self.fit(hits)
            documents: list[dict[str, Any]] = [
                {"title": h.title, "text": h.text, "source": h.source, "score": h.score}
                for h in kept
            ]
            system = self._template.render(documents=documents)
            messages = [{"role": "system", "content": system}, *conversation]
            result = RenderedPrompt(
                messages=messages,
                input_tokens=self.count_messages(messages),
                kept=len(kept),
                dropped=len(hits) - len(kept),
            )
            span.set_attributes(
                {
                    semconv.GEN_AI_USAGE_INPUT_TOKENS: result.input_tokens,
                    names.PROMPT_CONTEXT_TOKENS: context_tokens,
                    names.PROMPT_DOCUMENTS_KEPT: result.kept,
                    names.PROMPT_DOCUMENTS_DROPPED: result.dropped,
                }
            )
            return result
