"""Loading and saving, beside the data: SDAR checkpoints (``checkpoint``), tokenizers
(``tokenizer``, ``bpe``), the bundled targets (``targets``, data in ``targets/``), the shipped
drafters and the drafter registry (``drafters``, data in ``order_models/``), and atomic writes
(``files``)."""
