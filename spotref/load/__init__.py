"""What spotref ships, each format's reader and writer in one module, beside its data: the
bundled targets (``targets``: ``load_target``, ``save_target``; data in ``targets/``), the shipped
drafters and their checkpoint format (``drafters``, data in ``order_models/``) and tokenizers
(``tokenizer``, ``bpe``). SDAR checkpoints are the spec's own (``spotref.checkpoint``)."""
