"""Step names in other tools' vocabularies: one module per naming source, pure data keyed by family.

    hf.py               transformers module paths (what `capture` hooks and the trace's hf_module says): the
                        lookups, and the tables assembled from hf_base.py (the first families) and
                        hf_decoders.py (issue 10's decoder families), which import nothing from hf.py
    transformerlens.py  TransformerLens hook names (the same for every family)

Importing a module here changes no other module's tables; tracer.diff.names applies the maps.
"""
