"""A small causal GPT and a character tokenizer, sized to train on a CPU in minutes.

It exists so the checkpointer, the loss-spike guard, the supervisor and the
evaluation backend all exercise a *real* model rather than a mock. The on-disk
format is the public contract the evaluation engineer codes against:

    <dir>/config.json      TinyGPTConfig as JSON
    <dir>/model.pt         the model's state_dict (torch.save)
    <dir>/tokenizer.json   {"type": "char", "vocab": [...]}

Use :func:`save_pretrained` and :func:`load_pretrained`; keep their signatures stable.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.pt"
TOKENIZER_FILE = "tokenizer.json"


@dataclass(frozen=True)
class TinyGPTConfig:
    """Shape of a TinyGPT; every field is a plain int/float so it round-trips as JSON."""

    vocab_size: int = 96
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")

    @classmethod
    def from_dict(cls, data: dict) -> TinyGPTConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TinyGPTConfig keys {unknown}; valid: {sorted(known)}")
        return cls(**data)


class CharTokenizer:
    """Maps characters to ids; unknown characters map to id 0 (the first vocab entry)."""

    def __init__(self, vocab: list[str]) -> None:
        if not vocab:
            raise ValueError("tokenizer vocab is empty")
        if len(set(vocab)) != len(vocab):
            raise ValueError("tokenizer vocab has duplicate characters")
        self.vocab = list(vocab)
        self._index = {ch: i for i, ch in enumerate(self.vocab)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        return [self._index.get(ch, 0) for ch in text]

    def decode(self, ids: list[int]) -> str:
        n = len(self.vocab)
        return "".join(self.vocab[i] if 0 <= i < n else "" for i in ids)

    def to_dict(self) -> dict:
        return {"type": "char", "vocab": self.vocab}

    @classmethod
    def from_dict(cls, data: dict) -> CharTokenizer:
        if data.get("type") != "char":
            raise ValueError(f"unsupported tokenizer type {data.get('type')!r}; expected 'char'")
        return cls(list(data["vocab"]))


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        shape = (b, t, self.n_head, c // self.n_head)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Decoder-only transformer with learned positions and tied input/output embeddings."""

    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return (logits, loss); loss is None when no targets are given."""
        _, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.config.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    @torch.no_grad()
    def generate(
        self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
        top_k: int | None = None,
    ) -> torch.Tensor:
        """Sample continuations; temperature 0 means greedy."""
        for _ in range(max_new_tokens):
            cond = idx[:, -self.config.block_size:]
            logits, _ = self(cond)
            logits = logits[:, -1, :]
            if temperature <= 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("inf")
                nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, nxt), dim=1)
        return idx


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def save_pretrained(model: TinyGPT, tokenizer: CharTokenizer, directory: str | os.PathLike) -> Path:
    """Write config.json, model.pt and tokenizer.json into `directory` (created if needed)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / CONFIG_FILE, json.dumps(asdict(model.config), indent=2).encode())
    _write_atomic(out / TOKENIZER_FILE, json.dumps(tokenizer.to_dict()).encode())
    tmp = out / f".{WEIGHTS_FILE}.tmp{os.getpid()}"
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save(state, tmp)
    os.replace(tmp, out / WEIGHTS_FILE)
    return out


def load_pretrained(
    directory: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> tuple[TinyGPT, CharTokenizer]:
    """Load what :func:`save_pretrained` wrote; the model is returned in eval mode."""
    src = Path(directory)
    for name in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE):
        if not (src / name).is_file():
            raise FileNotFoundError(f"{src / name} is missing (not a TinyGPT export)")
    config = TinyGPTConfig.from_dict(json.loads((src / CONFIG_FILE).read_text()))
    tokenizer = CharTokenizer.from_dict(json.loads((src / TOKENIZER_FILE).read_text()))
    model = TinyGPT(config)
    state = torch.load(src / WEIGHTS_FILE, map_location=map_location, weights_only=True)
    model.load_state_dict(state)
    model.eval()
    return model, tokenizer
