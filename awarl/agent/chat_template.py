"""The chat template the agent runs with: the model's own, or a tool template awarl supplies.

The search agent needs a template that renders the tool's schema, the model's tool calls and the
tool's results. Instruct models such as Qwen2.5 ship one; others do not: SmolLM2-135M-Instruct's
template renders only ``role`` and ``content``, so the search tool and every tool call vanish from
the prompt. For those, ``rollout.chat_template: qwen2_5`` installs TRL's Qwen2.5 template
(`trl.chat_template_utils.qwen2_5_chat_template`, byte-identical, so TRL's tool loop recognises it:
its response parser, its training template for assistant-only loss, its tool-suffix splicing). It
is written in ``<|im_start|>`` / ``<|im_end|>`` turns, which SmolLM2's vocabulary already has as
single tokens; ``<tool_call>`` and the other tags are plain text there.

The choice is one of the rollout settings (`awarl.agent.settings.RolloutSettings.chat_template`),
so SFT, p_i, GRPO, evaluation and the chatbot all apply it through `use_chat_template`, and a
checkpoint saved by SFT or GRPO carries the template it was trained with.
"""

from __future__ import annotations

from typing import Any

from awarl.config_fields import ConfigError

CHAT_TEMPLATES = ("model", "qwen2_5")
"""``model``: the model's own template (it must render tool calls); ``qwen2_5``: TRL's Qwen2.5 tool template."""

_TURN_TOKENS = ("<|im_start|>", "<|im_end|>")
_PROBE_QUERY = "zqx probe query"


def supplied_template(name: str) -> str | None:
    """The template text awarl supplies for ``name`` (None for ``model``)."""
    if name == "model":
        return None
    if name == "qwen2_5":
        from trl.chat_template_utils import qwen2_5_chat_template

        return qwen2_5_chat_template
    raise ConfigError(f"rollout.chat_template must be one of {', '.join(CHAT_TEMPLATES)}, got {name!r}")


def use_chat_template(tokenizer: Any, name: str, model: str = "the model") -> Any:
    """Give ``tokenizer`` the agent's chat template (``name``, a `CHAT_TEMPLATES` value) and check it renders
    the search tool; a `ConfigError` names the model and the fix otherwise. Returns the tokenizer."""
    template = supplied_template(name)
    if template is not None:
        vocab = tokenizer.get_vocab()
        missing = [t for t in _TURN_TOKENS if t not in vocab]
        if missing:
            raise ConfigError(f"{model}: rollout.chat_template {name!r} is written in <|im_start|>/<|im_end|> turns, "
                              f"but the tokenizer has no {', '.join(missing)} token; use a model whose own template "
                              f"renders tools (rollout.chat_template: model)")
        if tokenizer.eos_token != "<|im_end|>":
            raise ConfigError(f"{model}: rollout.chat_template {name!r} ends each turn with <|im_end|>, but the "
                              f"tokenizer's eos token is {tokenizer.eos_token!r}: generation would not stop at the end "
                              f"of a turn. Set eos_token to <|im_end|> in its tokenizer_config.json")
        tokenizer.chat_template = template
        return tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"{model}: the tokenizer has no chat template; the tool loop needs one (an Instruct model), "
                          f"or set rollout.chat_template: qwen2_5 for a model with <|im_start|>/<|im_end|> turns")
    if not renders_tools(tokenizer):
        raise ConfigError(f"{model}: its chat template does not render tool calls or the tool schema (the search "
                          f"tool would vanish from every prompt); set rollout.chat_template: qwen2_5 in the recipe "
                          f"(TRL's Qwen2.5 tool template) for a model with <|im_start|>/<|im_end|> turns")
    return tokenizer


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's own template shows both the search tool's schema and a tool call's arguments."""
    from awarl.agent.env import tool_schema
    from awarl.protocol import tool_call_message

    schema = tool_schema()
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, tool_call_message(_PROBE_QUERY)]
    try:
        text = tokenizer.apply_chat_template(messages, tools=[schema], tokenize=False)
    except Exception:  # a template that cannot render these messages cannot run the agent either
        return False
    description = schema["function"]["description"].split("\n")[0]
    return _PROBE_QUERY in text and description in text


__all__ = ["CHAT_TEMPLATES", "renders_tools", "supplied_template", "use_chat_template"]
