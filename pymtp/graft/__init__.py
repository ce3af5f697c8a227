"""``pymtp graft``: train an MTP head for a base model that has none (self-distillation).

Modules, one job each (all but ``prompts`` and ``writer`` need PyTorch):

* ``gguf_weights``: read a GGUF's hyperparameters and tensors (dequantized to float32)
* ``torch_model``:  the base forward pass in torch and the MTP head module
* ``tokenizer``:    the base's tokenizer and chat template, through the native library
* ``prompts``:      the built-in prompt set for data generation
* ``dataset``:      token sequences as graft stores them (the npz of training data and self-written prompts)
* ``self_prompts``: prompts the base writes itself from its chat template
* ``data``:         generated (and optional corpus) training data, cached on disk
* ``train``:        the training loop, checkpoints, validation, report
* ``writer``:       the head-only GGUF and ``merge_head`` (base + head in one file)
* ``check``:        torch vs llama.cpp agreement
* ``acceptance``:   a head's per-position acceptance through the native engine
"""
