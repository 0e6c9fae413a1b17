"""Step names in other tools' vocabularies, one module per naming source, keyed by family.

    hf.py, hf_decoders.py   transformers module paths (what `capture` hooks and the trace's hf_module says)
"""
