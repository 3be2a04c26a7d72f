"""The networks: the tokenizer, the blocks (attention, MLP, norms, masks, readouts), the
positional encodings, the classifier, the thesis' classifier ported, the recurrent references,
and the encoder–decoder and decoder-only models; the C kernels and dropout streams they use."""
