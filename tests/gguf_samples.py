"""A tiny GGUF model written at test time with the ``gguf`` package, laid out like the real
SmolLM2-135M-Instruct file the catalog pins: llama architecture, a byte-level BPE vocabulary (``gpt2``
tokenizer model) whose first tokens are ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, no
``output.weight`` (tied embeddings), norms in float32, the embedding in Q8_0 and the layers in Q4_1."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType, TokenType
from tokenizers import pre_tokenizers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Words whose byte-level spellings are merged left to right into single tokens.
MERGED_WORDS = ["Ġthe", "Ġtool", "tool", "call", "name", "arguments", "Ġitem", "system", "user", "assistant"]


@dataclass(frozen=True)
class TinyGGUF:
    """What was written: the file, its vocabulary and the float weights before quantization."""

    path: Path
    tokens: list[str]
    embedding: np.ndarray  # (vocab, hidden), as dequantized from the file
    value_proj: list[np.ndarray]  # per layer (kv heads * head dim, hidden), as dequantized


def byte_level_vocabulary() -> tuple[list[str], list[str]]:
    """The special tokens, the 256 byte-level symbols, then the merged words; and their merges."""
    tokens = [*SPECIAL_TOKENS, *sorted(pre_tokenizers.ByteLevel.alphabet())]
    merges: list[str] = []
    for word in MERGED_WORDS:
        piece = word[0]
        for symbol in word[1:]:
            merged = piece + symbol
            if merged not in tokens:
                merges.append(f"{piece} {symbol}")
                tokens.append(merged)
            piece = merged
    return tokens, merges


def _quantized(values: np.ndarray, kind: GGMLQuantizationType) -> tuple[np.ndarray, np.ndarray]:
    """The quantized bytes of ``values`` and the float values a reader dequantizes them to."""
    data = gguf.quants.quantize(values, kind)
    return data, gguf.quants.dequantize(data, kind)


def write_tiny_gguf(
    path: Path,
    *,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    seed: int = 0,
) -> TinyGGUF:
    """Write a random llama-architecture model with the metadata transformers' GGUF loader reads."""
    rng = np.random.default_rng(seed)
    tokens, merges = byte_level_vocabulary()
    head_dim = hidden // heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("Tiny Test Llama")
    writer.add_block_count(layers)
    writer.add_context_length(2048)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_rope_dimension_count(head_dim)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([TokenType.CONTROL if t in SPECIAL_TOKENS else TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_space_prefix(False)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)

    embedding_data, embedding = _quantized(matrix(len(tokens), hidden), GGMLQuantizationType.Q8_0)
    writer.add_tensor("token_embd.weight", embedding_data, raw_dtype=GGMLQuantizationType.Q8_0)
    value_proj = []
    shapes = {
        "attn_q": (hidden, hidden),
        "attn_k": (kv_heads * head_dim, hidden),
        "attn_v": (kv_heads * head_dim, hidden),
        "attn_output": (hidden, hidden),
        "ffn_gate": (ffn, hidden),
        "ffn_up": (ffn, hidden),
        "ffn_down": (hidden, ffn),
    }
    for layer in range(layers):
        for name, (rows, cols) in shapes.items():
            data, values = _quantized(matrix(rows, cols), GGMLQuantizationType.Q4_1)
            writer.add_tensor(f"blk.{layer}.{name}.weight", data, raw_dtype=GGMLQuantizationType.Q4_1)
            if name == "attn_v":
                value_proj.append(values)
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{layer}.{norm}.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return TinyGGUF(path=path, tokens=tokens, embedding=embedding, value_proj=value_proj)
