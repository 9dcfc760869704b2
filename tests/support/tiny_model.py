"""The tiny model a real transformers server serves in the CPU sweep test and the GPU benches: random weights, a
word-level tokenizer over the sweep's prompt words, small enough to build in seconds."""

from __future__ import annotations

from pathlib import Path


def build_tiny_model(out: Path) -> None:
    """A 2-layer, 32-wide Llama with random weights and a word-level tokenizer over the sweep's prompt words."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from specmon.loadgen.workload import _WORDS

    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "<pad>", *sorted(set(_WORDS))])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=1, eos_token_id=2, pad_token_id=3)
    LlamaForCausalLM(cfg).save_pretrained(out)
    fast.save_pretrained(out)
