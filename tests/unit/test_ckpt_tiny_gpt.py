"""TinyGPT and its save_pretrained/load_pretrained contract (used by seval's builtin backend)."""

from __future__ import annotations

import json

import pytest
import torch

from slurm_acme.models.tiny_gpt import (
    CharTokenizer,
    TinyGPT,
    TinyGPTConfig,
    load_pretrained,
    save_pretrained,
)


def test_tokenizer_round_trips_text_and_maps_unknown_to_zero() -> None:
    tok = CharTokenizer.from_text("hello world")
    assert tok.decode(tok.encode("hello")) == "hello"
    assert tok.encode("z") == [0]


def test_forward_returns_logits_of_vocab_width_and_a_finite_loss() -> None:
    torch.manual_seed(0)
    model = TinyGPT(TinyGPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))
    idx = torch.randint(0, 11, (3, 8))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 8, 11)
    assert loss is not None and torch.isfinite(loss)


def test_model_is_causal_future_tokens_do_not_change_past_logits() -> None:
    torch.manual_seed(0)
    model = TinyGPT(TinyGPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16))
    model.eval()
    a = torch.randint(0, 11, (1, 8))
    b = a.clone()
    b[0, -1] = (a[0, -1] + 1) % 11
    la, _ = model(a)
    lb, _ = model(b)
    assert torch.allclose(la[0, :-1], lb[0, :-1])


def test_save_then_load_pretrained_gives_identical_outputs(tmp_path) -> None:
    torch.manual_seed(0)
    tok = CharTokenizer.from_text("abcdefg \n")
    model = TinyGPT(TinyGPTConfig(vocab_size=tok.vocab_size, block_size=8, n_layer=1,
                                  n_head=2, n_embd=16))
    save_pretrained(model, tok, tmp_path / "export")
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == [
        "config.json", "model.pt", "tokenizer.json"]
    loaded, loaded_tok = load_pretrained(tmp_path / "export")
    assert loaded_tok.vocab == tok.vocab
    idx = torch.tensor([tok.encode("abc def")])
    model.eval()
    assert torch.equal(model(idx)[0], loaded(idx)[0])
    assert json.loads((tmp_path / "export" / "config.json").read_text())["n_embd"] == 16


def test_load_pretrained_names_the_missing_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"model\.pt"):
        (tmp_path / "config.json").write_text("{}")
        (tmp_path / "tokenizer.json").write_text("{}")
        load_pretrained(tmp_path)


def test_config_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="bogus"):
        TinyGPTConfig.from_dict({"bogus": 1})
