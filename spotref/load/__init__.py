"""What spotref ships, each format's reader in one module, beside its data: the bundled
targets (``targets``: ``load_target``; data in ``targets/``; the repository's
``workbench.target_writer`` writes them), the shipped drafters and their checkpoint format
(``drafters``, data in ``order_models/``) and tokenizers (``tokenizer``, ``bpe``). SDAR
checkpoints are the spec's own (``spotref.checkpoint``)."""
