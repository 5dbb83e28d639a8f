"""Trained models: checkpoint readers, their real forward pass, and the geometry of their tokens.

Layer contract
--------------
A trained checkpoint read into the engine's types (:class:`~attndyn.core.weights.Weights` per
layer and head, with ``bert`` for the BERT family: BERT, MiniLM, ALBERT), its own forward pass
(hidden states and attention maps of every layer), and measures of token geometry across depth
(``token_geometry``). Reads files (safetensors, never pickle) but writes only caches; no pages, no
figures. Imports :mod:`attndyn.core` and :mod:`attndyn.analysis`.
"""
